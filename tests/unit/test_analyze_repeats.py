"""The confirmation round: which configurations are measured again, how rounds combine, and the
best chosen among the confirmed ones."""

from __future__ import annotations

import pytest

from inferd.tools.analyze.objective import Goals, Measurement, PointFigures, judge
from inferd.tools.analyze.repeats import combine, to_confirm
from inferd.tools.analyze.space import Candidate


def point(concurrency: int, throughput: float, p99_us: float = 1000.0) -> PointFigures:
    latency = {"avg": p99_us / 2, "p50": p99_us / 2, "p90": p99_us, "p95": p99_us, "p99": p99_us}
    return PointFigures(concurrency, throughput, latency)


def m(key: str, throughput: float, repeat: int = 0, memory: float | None = 100.0,
      error: str | None = None) -> Measurement:  # fmt: skip
    points = () if error else (point(1, throughput / 2), point(8, throughput))
    return Measurement("m", key, Candidate(1, 8, False), points, memory, error, repeat)


def test_rounds_of_a_config_are_averaged_per_load_point() -> None:
    first = m("a", 1000.0, memory=100.0)
    second = Measurement(
        "m",
        "a",
        first.candidate,
        (point(1, 700.0, 3000.0), point(8, 3000.0, 5000.0)),
        120.0,
        None,
        1,
    )
    (merged,) = combine([first, second])
    assert merged.runs == 2
    assert merged.memory_mb == 120.0
    assert [p.concurrency for p in merged.points] == [1, 8]
    assert merged.points[0].throughput == pytest.approx(600.0)
    assert merged.points[1].throughput == pytest.approx(2000.0)
    assert merged.points[1].latency("p99") == pytest.approx(3000.0)


def test_one_round_is_kept_as_is_and_an_error_wins() -> None:
    alone = m("b", 10.0)
    assert combine([alone]) == [alone]
    (failed,) = combine([m("c", 10.0), m("c", 0.0, repeat=1, error="load failed: x")])
    assert failed.error == "load failed: x"
    assert failed.runs == 2


def test_the_default_and_the_best_feasible_are_confirmed() -> None:
    found = [m("default", 500.0), m("a", 900.0), m("b", 800.0), m("c", 700.0)]
    found += [m("huge", 5000.0, memory=999.0), m("broken", 0.0, error="load failed: no")]
    outcome = judge("m", found, Goals(max_memory_mb=500))
    assert [x.key for x in to_confirm(outcome, 2)] == ["default", "a", "b"]
    assert to_confirm(outcome, 0) == []
    # a rerun after the default and "a" were confirmed: only "b" is left, whatever the
    # confirmation round measured (the choice follows the first round)
    assert [x.key for x in to_confirm(outcome, 2, {"default", "a"})] == ["b"]


def test_the_best_is_chosen_among_the_confirmed_ones() -> None:
    lucky = m("lucky", 2000.0)  # measured once
    steady = combine([m("steady", 1500.0), m("steady", 1400.0, repeat=1)])
    default = combine([m("default", 1000.0), m("default", 1100.0, repeat=1)])
    found = [*default, lucky, *steady]
    assert judge("m", found, Goals()).best is lucky
    best = judge("m", found, Goals(), confirmed_only=True).best
    assert best is not None
    assert best.key == "steady"
    # nothing confirmed is feasible: the pool falls back to every config
    tight = judge("m", found, Goals(max_memory_mb=1), confirmed_only=True)
    assert tight.best is None
