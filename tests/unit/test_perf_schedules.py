"""Open-loop schedules: the gaps between sends (constant, Poisson, from a file)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from inferd.errors import InvalidArgumentError
from inferd.tools.perf.options import Distribution, LoadMode, PerfOptions, Range, parse_range
from inferd.tools.perf.schedules import (
    constant_gaps,
    due_times,
    file_gaps,
    gaps,
    parse_intervals,
    poisson_gaps,
    read_intervals,
)


def test_constant_gaps_are_one_over_the_rate() -> None:
    assert list(itertools.islice(constant_gaps(250.0), 3)) == [0.004] * 3
    assert due_times(constant_gaps(100.0), 3, start=1.0) == pytest.approx([1.01, 1.02, 1.03])


def test_poisson_gaps_are_exponential_at_the_rate() -> None:
    rate = 400.0
    sample = np.array(list(itertools.islice(poisson_gaps(rate, np.random.default_rng(7)), 20000)))
    # the mean gap is 1/rate: the arrival rate is the one asked for (within 3%)
    assert 1 / sample.mean() == pytest.approx(rate, rel=0.03)
    # and the gaps follow the exponential distribution of that mean
    result = stats.kstest(sample, "expon", args=(0, 1 / rate))
    assert result.pvalue > 0.01
    # a uniform spread of the same mean is told apart: the test can fail
    uniform = np.random.default_rng(7).uniform(0, 2 / rate, 20000)
    assert stats.kstest(uniform, "expon", args=(0, 1 / rate)).pvalue < 1e-6


def test_poisson_arrivals_in_a_second_are_poisson_counts() -> None:
    rate = 50.0
    times = np.array(due_times(poisson_gaps(rate, np.random.default_rng(3)), 50 * 400))
    counts = np.bincount(times.astype(int))[:-1]  # arrivals in each whole second
    assert counts.mean() == pytest.approx(rate, rel=0.03)
    assert counts.var() == pytest.approx(rate, rel=0.2)  # Poisson: variance equals the mean


def test_the_same_seed_gives_the_same_schedule() -> None:
    def first(seed: int) -> list[float]:
        return list(
            itertools.islice(gaps(Distribution.POISSON, 10, np.random.default_rng(seed)), 5)
        )

    assert first(1) == first(1)
    assert first(1) != first(2)


def test_a_poisson_schedule_needs_a_generator_and_rates_must_be_positive() -> None:
    with pytest.raises(ValueError, match="Generator"):
        gaps(Distribution.POISSON, 10)
    with pytest.raises(InvalidArgumentError, match="above 0"):
        next(constant_gaps(0))
    with pytest.raises(InvalidArgumentError, match="above 0"):
        next(poisson_gaps(-1, np.random.default_rng(0)))


def test_an_intervals_file_is_read_in_microseconds_and_cycled(tmp_path: Path) -> None:
    path = tmp_path / "intervals.txt"
    path.write_text("1000\n\n2500\n500\n")
    intervals = read_intervals(path)
    assert intervals == (1000.0, 2500.0, 500.0)
    assert list(itertools.islice(file_gaps(intervals), 5)) == pytest.approx(
        [0.001, 0.0025, 0.0005, 0.001, 0.0025]
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "holds no intervals"), ("100\nabc\n", "line 2: 'abc'"), ("0\n", "above 0")],
)
def test_bad_intervals_files_are_refused_with_the_line(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_intervals(text)


def test_a_missing_intervals_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="cannot read the request intervals file"):
        read_intervals(tmp_path / "absent.txt")


def test_ranges_follow_perf_analyzer() -> None:
    assert parse_range("4", what="c", integer=True).values() == [4]
    assert parse_range("1:4", what="c", integer=True).values() == [1, 2, 3, 4]
    assert parse_range("1:8:3", what="c", integer=True).values() == [1, 4, 7]
    assert parse_range("0.5:1.5:0.5", what="r", integer=False).values() == [0.5, 1.0, 1.5]
    assert parse_range("0.1:0.3:0.1", what="r", integer=False).values() == pytest.approx(
        [0.1, 0.2, 0.3]
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a:b", "numbers"),
        ("1:2:3:4", "START"),
        ("1.5", "whole numbers"),
        ("0:4", "above 0"),
        ("1:0", "END 0"),
        ("4:2", "not be below"),
        ("1:4:0", "STEP"),
        ("1::2", "START"),
    ],
)
def test_bad_ranges_are_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_range(text, what="--concurrency-range", integer=True)


def test_options_list_their_load_levels() -> None:
    assert PerfOptions("m", concurrency=Range(1, 3, 1)).load_levels() == [1.0, 2.0, 3.0]
    rate = PerfOptions("m", mode=LoadMode.REQUEST_RATE, request_rate=Range(10, 30, 10))
    assert rate.load_levels() == [10.0, 20.0, 30.0]
    assert PerfOptions("m", mode=LoadMode.INTERVALS).load_levels() == [0.0]
    assert PerfOptions("m", stability_percentage=10).stability_ratio == pytest.approx(1.1)
