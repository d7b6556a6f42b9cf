"""What a measured configuration is worth: the objective, each constraint's verdict, the best
one, the margin over the default, and the Pareto front."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.errors import InvalidArgumentError
from inferd.tools.analyze.objective import (
    Goals,
    Measurement,
    PointFigures,
    evaluate,
    judge,
    pareto_front,
)
from inferd.tools.analyze.space import Candidate


def point(concurrency: int, throughput: float, p99_ms: float) -> PointFigures:
    us = p99_ms * 1000
    latency = {"avg": us / 2, "p50": us / 2, "p90": us * 0.8, "p95": us * 0.9, "p99": us}
    return PointFigures(concurrency, throughput, latency)


def measured(key: str, *points: PointFigures, memory: float | None = 100.0) -> Measurement:
    return Measurement("m", key, Candidate(1, 8, False), points, memory)


# concurrency 1: 1000/s at 1 ms; 4: 3000/s at 2 ms; 16: 4000/s at 6 ms
CURVE = measured("a", point(1, 1000, 1.0), point(4, 3000, 2.0), point(16, 4000, 6.0))


def test_throughput_without_constraints_is_the_best_load_point() -> None:
    verdict = evaluate(CURVE, Goals())
    assert verdict.feasible
    assert verdict.value == 4000
    assert verdict.point is not None
    assert verdict.point.concurrency == 16


def test_a_latency_budget_keeps_the_load_points_within_it() -> None:
    verdict = evaluate(CURVE, Goals(latency_budget_ms=3.0))
    assert verdict.value == 3000
    assert [c.passed for c in verdict.checks] == [True]
    too_tight = evaluate(CURVE, Goals(latency_budget_ms=0.5))
    assert not too_tight.feasible
    assert too_tight.value is None
    assert "1.000 ms" in too_tight.checks[0].detail


def test_the_budget_reads_the_chosen_percentile() -> None:
    # p50 is half of p99 here: at p50 the 6 ms point is within a 3.5 ms budget
    assert evaluate(CURVE, Goals(latency_budget_ms=3.5, percentile="p50")).value == 4000
    with pytest.raises(InvalidArgumentError, match="percentile"):
        Goals(percentile="p42")


def test_latency_objective_with_a_minimum_throughput() -> None:
    verdict = evaluate(CURVE, Goals(objective="latency", min_throughput=2500))
    assert verdict.value == pytest.approx(2.0)
    assert verdict.feasible
    unreachable = evaluate(CURVE, Goals(objective="latency", min_throughput=5000))
    assert not unreachable.feasible
    assert "4000.0 infer/s" in unreachable.checks[0].detail
    assert evaluate(CURVE, Goals(objective="latency")).value == pytest.approx(1.0)


def test_memory_limit_and_unmeasured_memory() -> None:
    assert evaluate(CURVE, Goals(max_memory_mb=150)).feasible
    assert not evaluate(CURVE, Goals(max_memory_mb=50)).feasible
    unknown = measured("b", point(1, 1000, 1.0), memory=None)
    check = evaluate(unknown, Goals(max_memory_mb=50)).checks[0]
    assert not check.passed
    assert check.detail == "not measured"


def test_a_failed_config_is_infeasible_and_scores_worst() -> None:
    failed = Measurement("m", "x", Candidate(1, 8, False), (), None, "load failed: boom")
    verdict = evaluate(failed, Goals())
    assert not verdict.feasible
    assert verdict.checks[0].detail == "load failed: boom"
    assert verdict.score(Goals()) == float("-inf")


def test_judge_picks_the_best_feasible_and_the_margin_over_the_default() -> None:
    default = measured("default", point(1, 1000, 1.0), point(4, 2000, 2.0))
    faster = measured("fast", point(1, 1200, 1.0), point(4, 3000, 2.5))
    fastest_but_big = measured("big", point(4, 5000, 2.0), memory=900.0)
    outcome = judge("m", [default, faster, fastest_but_big], Goals(max_memory_mb=500))
    assert outcome.best is faster
    assert outcome.default is default
    assert outcome.margin() == pytest.approx(0.5)
    latency = judge("m", [default, faster], Goals(objective="latency"))
    assert latency.best is default  # equal latency: the first measured wins
    assert latency.margin() == pytest.approx(0.0)
    nothing = judge("m", [default], Goals(latency_budget_ms=0.1))
    assert nothing.best is None
    assert nothing.margin() is None


def test_pareto_front_example() -> None:
    pairs = [(1.0, 1000.0), (2.0, 3000.0), (2.5, 2500.0), (6.0, 4000.0), (6.0, 3900.0)]
    assert pareto_front(pairs) == [0, 1, 3]


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 50)), max_size=40))
def test_the_front_is_exactly_the_undominated_pairs(raw: list[tuple[int, int]]) -> None:
    pairs = [(float(a), float(b)) for a, b in raw]

    def dominates(p: tuple[float, float], q: tuple[float, float]) -> bool:
        return p[0] <= q[0] and p[1] >= q[1] and p != q

    front = pareto_front(pairs)
    undominated = {i for i, q in enumerate(pairs) if not any(dominates(p, q) for p in pairs)}
    # duplicates of an undominated pair: the front keeps one of them
    assert set(front) <= undominated
    assert {pairs[i] for i in front} == {pairs[i] for i in undominated}
    assert [pairs[i][0] for i in front] == sorted(pairs[i][0] for i in front)
