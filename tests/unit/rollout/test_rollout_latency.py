"""The latency window: numpy's percentiles over the last values, in a fixed amount of memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.rollout.latency import LatencySummary, LatencyWindow

QS = [0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 100.0]


@pytest.mark.parametrize("count", [1, 7, 999, 1000, 1001, 5000])
def test_percentiles_are_numpys_over_the_last_values(count: int) -> None:
    data = np.random.default_rng(count).lognormal(-4.0, 1.0, count)
    window = LatencyWindow(1000)
    for x in data:
        window.add(float(x))
    held = data[-1000:]
    assert window.filled == len(held)
    assert window.total == count
    for q in QS:
        assert window.percentile(q) == pytest.approx(float(np.percentile(held, q)), rel=1e-12)
    p50, p99 = np.percentile(held, [50.0, 99.0])
    assert window.summary() == LatencySummary(len(held), pytest.approx(p50), pytest.approx(p99))


@given(
    st.lists(st.floats(0.0, 1e3), min_size=1, max_size=80),
    st.integers(1, 40),
    st.floats(0.0, 100.0),
)
def test_any_percentile_is_numpys(values: list[float], capacity: int, q: float) -> None:
    window = LatencyWindow(capacity)
    for x in values:
        window.add(x)
    expected = float(np.percentile(values[-capacity:], q))
    assert window.percentile(q) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@given(st.lists(st.floats(0.0, 10.0), max_size=50), st.integers(1, 20))
def test_the_window_holds_exactly_the_last_values(values: list[float], capacity: int) -> None:
    window = LatencyWindow(capacity)
    for x in values:
        window.add(x)
    assert sorted(window.values().tolist()) == sorted(values[-capacity:] if values else [])
    assert window.capacity == capacity


def test_an_empty_window_has_no_percentiles() -> None:
    window = LatencyWindow(10)
    assert window.percentile(99.0) is None
    assert window.summary() == LatencySummary(0, None, None)
    assert window.summary().as_dict() == {"samples": 0, "p50_s": None, "p99_s": None}
    window.add(0.5)
    window.clear()
    assert (window.filled, window.total, window.percentile(50.0)) == (0, 0, None)


def test_memory_does_not_grow_with_the_traffic() -> None:
    window = LatencyWindow(1000)
    data = np.random.default_rng(0).random(50_000).tolist()
    for x in data[:1000]:
        window.add(x)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for x in data[1000:]:
            window.add(x)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 4096
    assert window.filled == 1000
    assert window.total == 50_000


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="capacity must be at least 1, not 0"):
        LatencyWindow(0)
    with pytest.raises(ValueError, match=r"a percentile must lie in \[0, 100\], not 101"):
        LatencyWindow(1).percentile(101)
