"""The HPA rule against cases worked by hand from the Kubernetes documentation
(kubernetes.io, "Horizontal Pod Autoscaling": algorithm details, stabilization window,
scaling policies) and the controller's handling of missing and not-ready pods."""

from __future__ import annotations

import pytest

from inferd.errors import InvalidArgumentError
from inferd.tools.scaling.hpa import (
    PENDING,
    Behavior,
    ControllerSettings,
    HpaSpec,
    HpaState,
    MetricSample,
    MetricTarget,
    PodView,
    ScalingPolicy,
    ScalingRules,
    metric_proposal,
    sync,
)

PENDING_METRIC = MetricTarget("pending", 1.0)
CPU_50 = MetricTarget("cpu", 50, cpu_utilization=True)


def spec(*metrics: MetricTarget, lo: int = 1, hi: int = 100, behavior: Behavior | None = None):
    return HpaSpec(lo, hi, metrics or (PENDING_METRIC,), behavior or Behavior())


def pods(value: float, count: int = 1, name: str = "pending", **kw: object) -> PodView:
    return PodView(count=count, samples={name: MetricSample(value, 100.0, 30.0)}, **kw)  # type: ignore[arg-type]


def propose(current: int, listed: list[PodView], metric: MetricTarget = PENDING_METRIC) -> int:
    result = metric_proposal(current, listed, metric, 1000.0, spec(metric))
    assert result.replicas is not None, result.error
    return result.replicas


# -- desiredReplicas = ceil(currentReplicas * currentMetricValue / desiredMetricValue) ---------


def test_twice_the_target_doubles_the_replicas() -> None:
    # the docs: current 200m, desired 100m -> 200.0 / 100.0 == 2.0, the replicas double
    metric = MetricTarget("pending", 0.1)
    assert propose(4, [pods(0.2, 4)], metric) == 8


def test_half_the_target_halves_the_replicas() -> None:
    # the docs: current 50m, desired 100m -> 0.5, the replicas halve
    metric = MetricTarget("pending", 0.1)
    assert propose(4, [pods(0.05, 4)], metric) == 2


def test_the_ratio_is_rounded_up() -> None:
    # 3 pods at 1.5 with target 1: ceil(3 * 1.5) = ceil(4.5) = 5
    assert propose(3, [pods(1.5, 3)]) == 5


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.05, 4),  # within the 10 % tolerance: no change
        (1.10, 4),  # the tolerance's edge is still within
        (0.90, 4),
        (1.11, 5),  # ceil(4 * 1.11) = 5
        (0.89, 4),  # ceil(4 * 0.89) = ceil(3.56) = 4
        (0.70, 3),  # ceil(2.8) = 3
    ],
)
def test_the_ten_percent_tolerance(value: float, expected: int) -> None:
    assert propose(4, [pods(value, 4)]) == expected


def test_a_tolerance_per_direction_from_the_behavior() -> None:
    behavior = Behavior(
        scale_up=ScalingRules(0, (ScalingPolicy("Percent", 100, 15),), tolerance=0.0),
        scale_down=ScalingRules(300, (ScalingPolicy("Percent", 100, 15),), tolerance=0.5),
    )
    s = HpaSpec(1, 100, (PENDING_METRIC,), behavior)
    up = metric_proposal(4, [pods(1.05, 4)], PENDING_METRIC, 0.0, s)
    down = metric_proposal(4, [pods(0.6, 4)], PENDING_METRIC, 0.0, s)
    assert (up.replicas, down.replicas) == (5, 4)


def test_cpu_utilisation_is_a_whole_percentage_of_the_requests() -> None:
    # 0.299 cores of a 0.5-core request is 59.8 %, truncated to 59 %: 59 / 60 is within
    metric = MetricTarget("cpu", 60, cpu_utilization=True)
    pod = pods(0.299, 4, name="cpu", cpu_request=0.5)
    result = metric_proposal(4, [pod], metric, 0.0, spec(metric))
    assert (result.replicas, result.usage) == (4, 59.0)


# -- missing metrics and pods that are not ready --------------------------------------------


def test_missing_pods_count_at_the_target_on_the_way_down() -> None:
    # 3 pods at 0.2 (target 1) and one without a sample: (0.6 + 1.0) / 4 = 0.4,
    # ceil(0.4 * 4) = 2, where the three alone would say ceil(0.2 * 3) = 1
    listed = [pods(0.2, 3), PodView(count=1)]
    assert propose(4, listed) == 2


def test_missing_pods_count_at_zero_on_the_way_up() -> None:
    # 2 pods at 1.2 and 2 without samples: 2.4 / 4 = 0.6 reverses the direction: no change
    listed = [pods(1.2, 2), PodView(count=2)]
    assert propose(4, listed) == 4


def test_pending_pods_count_at_zero_on_the_way_up() -> None:
    # 2 running pods at 1.5, 2 pending: alone they would ask for ceil(1.5 * 2) = 3 (fewer than
    # the 4 already asked for); at 0 the pending pods make 3 / 4 = 0.75: a reversal, no change
    listed = [pods(1.5, 2), PodView(count=2, phase=PENDING, ready=False)]
    assert propose(4, listed) == 4


def test_pending_pods_count_as_capacity_already_asked_for() -> None:
    # 2 at 4.0 and 2 pending: 8 / 4 = 2.0, ceil(2 * 4) = 8 in all (not 4 * 4 = 16 from the
    # running pods' ratio applied to every pod)
    listed = [pods(4.0, 2), PodView(count=2, phase=PENDING, ready=False)]
    assert propose(4, listed) == 8


def test_pending_pods_are_left_out_on_the_way_down() -> None:
    # set aside, and not added back: only the running pods' average counts
    listed = [pods(0.5, 4), PodView(count=2, phase=PENDING, ready=False)]
    assert propose(6, listed) == 2


def test_cpu_of_pods_not_yet_ready_is_set_aside() -> None:
    # 2 ready pods at 100 % of their request, target 50 %: ratio 2. Two more pods run but
    # are not ready (loading): their CPU is set aside and counted as 0 on the way up,
    # 200 / 400 = 50 %: within the tolerance, no change.
    warming = pods(1.0, 2, name="cpu", ready=False, start_s=990.0, ready_transition_s=990.0)
    listed = [pods(1.0, 2, name="cpu"), warming]
    assert propose(4, listed, CPU_50) == 4
    # with a higher load: 2 at 150 % -> 300 / 400 = 75 %, ceil(1.5 * 4) = 6 (not the ready
    # pods' ratio of 3 applied to all four, 12)
    listed = [pods(1.5, 2, name="cpu"), warming]
    assert propose(4, listed, CPU_50) == 6


def test_a_pods_metric_counts_running_pods_that_are_not_ready() -> None:
    # the readiness rule is the CPU metric's alone: a running pod with a sample counts
    warming = pods(0.0, 2, ready=False, start_s=990.0, ready_transition_s=990.0)
    assert propose(4, [pods(2.0, 2), warming]) == 4  # (4 + 0) / 4 = 1.0


def test_a_cpu_sample_reaching_before_readiness_is_set_aside() -> None:
    metric = CPU_50
    s = spec(metric)
    # started at 900, ready at 980; a 30 s sample taken at 1000 covers time before 980
    fresh = PodView(
        count=1,
        start_s=900.0,
        ready_transition_s=980.0,
        samples={"cpu": MetricSample(1.0, 1000.0, 30.0)},
    )
    old = PodView(count=1, start_s=0.0, samples={"cpu": MetricSample(0.25, 1000.0, 30.0)})
    # the fresh pod set aside: 25 % on one pod -> ratio 0.5, and on the way down it is not
    # added back: ceil(0.5 * 1) = 1
    assert metric_proposal(2, [old, fresh], metric, 1000.0, s).replicas == 1
    # a sample taken 30 s after readiness counts: (25 + 100) / 2 = 62 % -> ceil(1.24 * 2) = 3
    later = PodView(
        count=1,
        start_s=900.0,
        ready_transition_s=980.0,
        samples={"cpu": MetricSample(1.0, 1010.0, 30.0)},
    )
    assert metric_proposal(2, [old, later], metric, 1010.0, s).replicas == 3


def test_after_the_cpu_initialization_period_only_never_ready_pods_are_set_aside() -> None:
    s = spec(CPU_50)
    sample = {"cpu": MetricSample(1.0, 2000.0, 30.0)}
    base = PodView(count=1, start_s=0.0, samples={"cpu": MetricSample(1.0, 2000.0, 30.0)})
    never_ready = PodView(
        count=1, ready=False, start_s=1000.0, ready_transition_s=1000.0, samples=sample
    )
    was_ready = PodView(
        count=1, ready=False, start_s=1000.0, ready_transition_s=1200.0, samples=sample
    )
    # never ready: set aside, and at 0 on the way up: (100 + 0) / 2 = 50 % -> no change
    assert metric_proposal(2, [base, never_ready], CPU_50, 2000.0, s).replicas == 2
    # once ready, later unready: counted, (100 + 200) / 2 = 150 % -> ceil(3 * 2) = 6
    heavy = PodView(count=1, start_s=0.0, samples={"cpu": MetricSample(2.0, 2000.0, 30.0)})
    assert metric_proposal(2, [heavy, was_ready], CPU_50, 2000.0, s).replicas == 6


def test_deleting_and_failed_pods_are_ignored() -> None:
    listed = [pods(2.0, 2), pods(0.0, 3, deleting=True), pods(0.0, 1, phase="Failed")]
    assert propose(2, listed) == 4


def test_no_samples_at_all_is_an_error_and_keeps_the_count() -> None:
    s = spec()
    listed = [PodView(count=3, phase=PENDING, ready=False)]
    assert metric_proposal(3, listed, PENDING_METRIC, 0.0, s).replicas is None
    result = sync(s, HpaState(), 3, listed, 0.0)
    assert result.desired == 3
    assert "did not receive metrics" in result.reason


# -- several metrics, min and max ----------------------------------------------------------------


def test_the_largest_proposal_wins() -> None:
    s = spec(PENDING_METRIC, CPU_50)
    pod = PodView(
        count=4,
        samples={"pending": MetricSample(0.5, 990, 30), "cpu": MetricSample(0.75, 990, 30)},
    )
    # pending asks for 2, cpu (75 % / 50 %) for 6
    assert sync(s, HpaState(), 4, [pod], 1000.0).desired == 6


def test_a_failing_metric_blocks_a_scale_down_but_not_a_scale_up() -> None:
    s = spec(PENDING_METRIC, CPU_50)
    low = PodView(count=4, samples={"pending": MetricSample(0.25, 0, 30)})
    high = PodView(count=4, samples={"pending": MetricSample(2.0, 0, 30)})
    assert sync(s, HpaState(), 4, [low], 400.0).desired == 4
    assert sync(s, HpaState(), 4, [high], 400.0).desired == 8


def test_min_and_max_bound_the_count() -> None:
    s = spec(lo=2, hi=6)
    assert sync(s, HpaState(), 4, [pods(10.0, 4)], 0.0).desired == 6
    result = sync(s, HpaState(), 4, [pods(0.01, 4)], 400.0)
    assert (result.desired, result.reason) == (2, "TooFewReplicas")
    # a count outside the bounds is brought back without looking at the metrics
    assert sync(s, HpaState(), 9, [], 0.0).desired == 6
    assert sync(s, HpaState(), 1, [], 0.0).desired == 2


def test_a_workload_at_zero_replicas_is_left_alone() -> None:
    assert sync(spec(), HpaState(), 0, [], 0.0).desired == 0


def test_bad_specs_are_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        HpaSpec(0, 5, (PENDING_METRIC,))
    with pytest.raises(InvalidArgumentError):
        HpaSpec(5, 4, (PENDING_METRIC,))
    with pytest.raises(InvalidArgumentError):
        ScalingPolicy("Replicas", 4, 15)
    with pytest.raises(InvalidArgumentError):
        ScalingRules(0, (ScalingPolicy("Pods", 4, 15),), "Most")
    with pytest.raises(InvalidArgumentError):
        MetricTarget("cpu", 62.5, cpu_utilization=True)


# -- behaviour: stabilization and policies ---------------------------------------------------------


def run_syncs(s: HpaSpec, current: int, values: list[float], step: float = 15.0) -> list[int]:
    """Sync every ``step`` seconds with every pod at the next value; the count each sync set."""
    state, out = HpaState(), []
    for i, value in enumerate(values):
        result = sync(s, state, current, [pods(value, current)], (i + 1) * step)
        state, current = result.state, result.desired
        out.append(current)
    return out


def test_scale_down_waits_for_the_stabilization_window() -> None:
    # a recommendation of 10 at t=15, then load for 4 pods: the highest recommendation of the
    # last 300 s holds the count at 10 until the first one leaves the window (at t=315)
    s = spec()
    counts = run_syncs(s, 10, [1.0] + [0.4] * 22)
    times = [(i + 1) * 15 for i in range(len(counts))]
    assert all(c == 10 for c, t in zip(counts, times, strict=True) if t < 315)
    assert dict(zip(times, counts, strict=True))[315] == 4


def test_a_scale_up_is_not_stabilized_by_default() -> None:
    assert run_syncs(spec(), 4, [2.0]) == [8]


def test_a_scale_up_window_takes_the_lowest_recent_recommendation() -> None:
    up = ScalingRules(60, (ScalingPolicy("Percent", 100, 15),))
    s = spec(behavior=Behavior(scale_up=up))
    # the load doubles at once; the first recommendation (4, within the window) holds the
    # count until it is more than 60 s old
    counts = run_syncs(s, 4, [1.0, 2.0, 2.0, 2.0, 2.0, 2.0])
    assert counts == [4, 4, 4, 4, 8, 8]


def test_default_scale_up_is_the_larger_of_100_percent_and_4_pods_per_15s() -> None:
    s = spec(hi=1000)
    # from 1 pod: max(ceil(1 * 2), 1 + 4) = 5; from 10: max(20, 14) = 20
    assert sync(s, HpaState(), 1, [pods(50.0, 1)], 0.0).desired == 5
    result = sync(s, HpaState(), 10, [pods(50.0, 10)], 0.0)
    assert (result.desired, result.reason) == (20, "ScaleUpLimit")
    # each sync 15 s apart starts a new period: 1 -> 5 -> 10 -> 20 -> 40
    assert run_syncs(s, 1, [500.0] * 4) == [5, 10, 20, 40]


DOCS_SCALE_DOWN = ScalingRules(
    0, (ScalingPolicy("Pods", 4, 60), ScalingPolicy("Percent", 10, 60)), "Max"
)


def test_the_docs_scale_down_example() -> None:
    # the docs: with Pods 4/60 s and Percent 10/60 s, 80 replicas going to 10 lose 8 in the
    # first step; the next step, a period later, starts from 72 and loses 8 again (7.2
    # rounded up); below 40 replicas the Pods policy's 4 is the larger change
    s = spec(behavior=Behavior(scale_down=DOCS_SCALE_DOWN))
    counts = run_syncs(s, 80, [0.125] * 9)  # every 15 s, the metrics ask for 10
    assert counts == [72, 72, 72, 72, 64, 64, 64, 64, 57]
    assert run_syncs(s, 30, [0.1] * 5)[::4] == [26, 22]


def test_select_policy_min_takes_the_smallest_change() -> None:
    rules = ScalingRules(0, DOCS_SCALE_DOWN.policies, "Min")
    s = spec(behavior=Behavior(scale_down=rules))
    assert run_syncs(s, 80, [0.125])[0] == 76


def test_select_policy_disabled_turns_a_direction_off() -> None:
    off = ScalingRules(0, (), "Disabled")
    s = spec(behavior=Behavior(scale_down=off))
    assert run_syncs(s, 8, [0.1] * 30)[-1] == 8
    s = spec(behavior=Behavior(scale_up=off))
    assert run_syncs(s, 8, [5.0] * 5)[-1] == 8


def test_percent_scale_up_rounds_up_so_small_counts_can_grow() -> None:
    up = ScalingRules(0, (ScalingPolicy("Percent", 10, 15),))
    s = spec(behavior=Behavior(scale_up=up))
    # ceil(1 * 1.1) = 2, ceil(2 * 1.1) = 3, ceil(3 * 1.1) = 4
    assert run_syncs(s, 1, [100.0] * 3) == [2, 3, 4]


def test_settings_of_the_controller_are_used() -> None:
    s = HpaSpec(1, 100, (PENDING_METRIC,), controller=ControllerSettings(tolerance=0.0))
    assert sync(s, HpaState(), 4, [pods(1.05, 4)], 0.0).desired == 5
