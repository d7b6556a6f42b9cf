"""The whole simulation: the textbook HPA case, pods that take time to start, warm spares,
and what is conserved whatever the traffic."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.tools.scaling.capacity import CapacityCurve, CurvePoint
from inferd.tools.scaling.hpa import HpaSpec, MetricTarget
from inferd.tools.scaling.replica import ReplicaModel
from inferd.tools.scaling.simulate import (
    MetricsPipeline,
    PodTiming,
    SimulationConfig,
    simulate,
)

CPU_50 = MetricTarget("cpu", 50, cpu_utilization=True)


def curve(peak: float = 1000.0) -> CapacityCurve:
    """A replica that answers up to ``peak`` requests per second, latency rising with load
    (no CPU measured: utilisation is the share of the peak)."""
    rows = [
        (0.25, 2000, 4000, 50),
        (0.5, 2200, 4500, 150),
        (0.75, 2600, 5500, 400),
        (1.0, 4000, 9000, 2000),
    ]
    return CapacityCurve(
        tuple(
            CurvePoint(
                rps=peak * share,
                percentiles_us={50: p50, 90: p50 * 1.5, 95: p50 * 1.8, 99: p99},
                queue_us=queue,
                level=i + 1,
            )
            for i, (share, p50, p99, queue) in enumerate(rows)
        )
    )


def config(**kw: object) -> SimulationConfig:
    spec = kw.pop("spec", HpaSpec(1, 20, (CPU_50,)))
    base = {
        "hpa": spec,
        "replica": ReplicaModel(curve(), 1.0, 1.0),
        "timing": PodTiming(start_s=20, warm_up_s=10, stop_s=10),
        "pipeline": MetricsPipeline(sync_period_s=15, scrape_interval_s=15, window_s=15),
        "report_interval_s": 15,
    }
    base.update(kw)
    return SimulationConfig(**base)  # type: ignore[arg-type]


def replicas_at(result, t: float) -> float:
    return float(result.replicas[int(t // 15)])


def test_the_textbook_case_load_doubles_and_so_do_the_replicas() -> None:
    # 4 pods at 50 % CPU (500 of 1000 req/s each); the load doubles at t=600: the first sync
    # that sees it (t=615, on the samples of 600-615) asks for ceil(4 * 100 / 50) = 8, which
    # the default scale-up policy (100 % or 4 pods per 15 s) allows at once
    offered = np.array([2000.0] * 600 + [4000.0] * 1200)
    result = simulate(config(), offered)
    assert result.totals.initial_replicas == 4
    assert replicas_at(result, 599) == 4
    assert replicas_at(result, 614) == 4
    assert replicas_at(result, 629) == 8
    assert result.totals.max_replicas == 8  # the pods not yet ready do not push it further
    # once the new pods take traffic, each carries 500 req/s again: 50 %
    assert result.usages["cpu"][-1] == pytest.approx(50.0, abs=1)
    assert result.ready[-1] == 8


def test_scale_down_waits_the_stabilization_window() -> None:
    # the load halves at t=1800; the first sync seeing it (1815) recommends 4, but the
    # recommendations of 8 made up to t=1800 hold the count until t=2100 (300 s later)
    offered = np.array([4000.0] * 1800 + [2000.0] * 900)
    result = simulate(config(), offered)
    assert result.totals.initial_replicas == 8
    assert replicas_at(result, 2099) == 8
    assert replicas_at(result, 2100) == 4
    assert result.totals.scale_downs == 1


def test_requests_fail_while_new_pods_start() -> None:
    # a load step to 3x the one pod's peak: CPU cannot show more than 100 %, so the HPA
    # doubles the fleet per round (1 -> 2 -> 4 -> 7), each round waiting for its pods to be
    # ready (30 s) and sampled; meanwhile the ready pods queue up to the 1 s timeout and
    # refuse the rest
    offered = np.array([500.0] * 300 + [3000.0] * 600)
    result = simulate(config(), offered)
    t = result.totals
    assert [replicas_at(result, s) for s in (314, 329, 374, 419)] == [1, 2, 4, 7]
    assert 0 < t.failed_scaling < t.failed  # some failed while no pod was starting
    assert t.queued > 0
    assert float(result.failed[: 300 // 15].sum()) == 0
    assert float(result.failed[390 // 15 :].sum()) == 0  # with 4 pods up, nothing fails
    assert t.offered == pytest.approx(t.served + t.failed + t.left_in_queues, rel=1e-9)


def test_slower_pods_cost_more_failures() -> None:
    offered = np.array([500.0] * 300 + [3000.0] * 600)
    fast = simulate(config(timing=PodTiming(start_s=5, warm_up_s=5)), offered)
    slow = simulate(config(timing=PodTiming(start_s=60, warm_up_s=60)), offered)
    assert slow.totals.failed > fast.totals.failed


def test_warm_spares_absorb_a_spike() -> None:
    offered = np.array([200.0] * 600 + [2500.0] * 300 + [200.0] * 1200)
    cold = simulate(config(), offered)
    warm = simulate(config(spec=HpaSpec(3, 20, (CPU_50,))), offered)
    assert warm.totals.failed < cold.totals.failed
    assert warm.totals.pod_hours > cold.totals.pod_hours


def test_pod_hours_count_every_billed_pod() -> None:
    offered = np.full(3600, 1000.0)  # 2 pods at 50 %, all hour
    result = simulate(config(), offered)
    assert result.totals.pod_hours == pytest.approx(2.0)
    assert result.totals.scale_ups == result.totals.scale_downs == 0


@settings(max_examples=25, deadline=None)
@given(
    levels=st.lists(st.floats(min_value=0.0, max_value=6000.0), min_size=2, max_size=6),
    lo=st.integers(min_value=1, max_value=3),
    hi=st.integers(min_value=3, max_value=10),
    metric=st.sampled_from([CPU_50, MetricTarget("pending", 0.5), MetricTarget("queue-us", 500.0)]),
)
def test_conservation_and_bounds(
    levels: list[float], lo: int, hi: int, metric: MetricTarget
) -> None:
    offered = np.repeat(np.array(levels), 120)
    result = simulate(config(spec=HpaSpec(lo, hi, (metric,))), offered)
    t = result.totals
    assert t.offered == pytest.approx(t.served + t.failed + t.left_in_queues, rel=1e-9, abs=1e-6)
    assert lo <= t.min_replicas <= t.max_replicas <= hi
    assert np.all((result.replicas >= lo) & (result.replicas <= hi))
    assert t.failed_scaling <= t.failed + 1e-6
    assert t.queued <= t.offered + 1e-6


def test_a_plan_sweeps_min_replicas_beside_a_fixed_fleet() -> None:
    from inferd.tools.scaling.sweep import run_plan

    offered = np.array([400.0] * 300 + [2600.0] * 300 + [400.0] * 300)
    spec = HpaSpec(1, 10, (CPU_50, MetricTarget("pending", 50.0)))
    plan = run_plan(config(spec=spec), offered, [1, 2])
    assert [r.label for r in plan.runs] == [
        "minReplicas 1",
        "minReplicas 2",
        "fixed 6 (peak at target)",  # 2600 req/s at 500 per pod (CPU 50 %)
    ]
    assert plan.runs[-1].result.totals.min_replicas == plan.runs[-1].result.totals.max_replicas
    assert plan.per_pod_rps == {"cpu": pytest.approx(500.0), "pending": None}
    # at its peak one pod holds 1000 x 2 ms = 2 pending requests, never 50
    assert len(plan.warnings) == 1
    assert "never reaches pending=50" in plan.warnings[0]


def test_merging_pod_groups_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # groups of pods that have behaved alike for a while are kept as one; keeping every group
    # apart must give the same day
    import inferd.tools.scaling.simulate as simulate_module

    offered = np.concatenate([np.linspace(200, 6000, 1800), np.linspace(6000, 300, 1800)])
    spec = HpaSpec(1, 12, (MetricTarget("pending", 0.3),))
    merged = simulate(config(spec=spec), offered)
    monkeypatch.setattr(simulate_module, "merge_groups", lambda groups, *_: groups)
    apart = simulate(config(spec=spec), offered)
    assert asdict(merged.totals) == pytest.approx(asdict(apart.totals), rel=1e-12)
    assert np.array_equal(merged.replicas, apart.replicas)
    assert np.allclose(merged.p99_us, apart.p99_us, equal_nan=True)
