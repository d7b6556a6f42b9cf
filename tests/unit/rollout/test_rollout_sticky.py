"""Sticky assignment: the same bucket in every process, uniform over keys, exact boundaries."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.rollout.sticky import bucket, pick

USER_42 = 0.041298844934827605  # bucket("user-42", "policy-a"), fixed for good


def test_a_key_has_the_same_bucket_everywhere() -> None:
    assert bucket("user-42", "policy-a") == USER_42
    script = "from inferd.rollout.sticky import bucket; print(repr(bucket('user-42', 'policy-a')))"
    for seed in ("1", "2"):  # Python's own str hash differs between these processes
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        assert float(out.stdout) == USER_42


def test_the_salt_separates_policies() -> None:
    assert bucket("user-42", "policy-b") != USER_42
    assert bucket("ab", "c") != bucket("b", "ac")  # the salt's length is part of the hash
    keys = [f"user-{i}" for i in range(2000)]
    a = [bucket(k, "policy-a") for k in keys]
    b = [bucket(k, "policy-b") for k in keys]
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - mean_a) * (y - mean_b) for x, y in zip(a, b, strict=True)) / len(a)
    assert abs(cov / (1 / 12)) < 0.1  # uncorrelated: two policies split users independently


def test_buckets_are_uniform_over_keys() -> None:
    bins = 20
    counts = [0] * bins
    for i in range(10_000):
        counts[int(bucket(f"session-{i}", "salt") * bins)] += 1
    expected = 10_000 / bins
    chi2 = sum((c - expected) ** 2 / expected for c in counts)
    assert chi2 < 43.8, counts  # the 0.999 quantile of chi-square with 19 degrees of freedom
    assert chi2 > 5.4, counts  # ... and its 0.001 quantile: too even is not random either


@given(st.text(), st.text())
def test_a_bucket_lies_in_zero_one(key: str, salt: str) -> None:
    assert 0.0 <= bucket(key, salt) < 1.0


WEIGHTS = [("a", 1.0), ("b", 3.0)]
BELOW_ONE = math.nextafter(1.0, 0.0)


@pytest.mark.parametrize(
    ("u", "name"),
    [(0.0, "a"), (0.2499999, "a"), (0.25, "b"), (0.9, "b"), (BELOW_ONE, "b")],
)
def test_pick_boundaries(u: float, name: str) -> None:
    assert pick(WEIGHTS, u) == name


def test_zero_weights_are_never_picked() -> None:
    weights = [("off", 0.0), ("on", 2.0), ("also_off", 0.0)]
    assert {pick(weights, u) for u in (0.0, 0.5, BELOW_ONE)} == {"on"}
    assert pick([("a", 1.0), ("b", 0.0), ("c", 1.0)], 0.5) == "c"


def test_weights_need_not_sum_to_one() -> None:
    assert pick([("a", 10.0), ("b", 30.0)], 0.2) == pick([("a", 0.25), ("b", 0.75)], 0.2) == "a"
    grid = [pick([("a", 2.0), ("b", 5.0), ("c", 3.0)], i / 1000) for i in range(1000)]
    assert [grid.count(n) for n in "abc"] == [200, 500, 300]


@given(
    st.lists(st.floats(0.0, 100.0), min_size=1, max_size=6).filter(lambda w: sum(w) > 0),
    st.floats(0.0, 1.0, exclude_max=True),
    st.floats(0.0, 1.0, exclude_max=True),
)
def test_pick_is_monotone_and_picks_a_weighted_name(
    weights: list[float], u: float, v: float
) -> None:
    named = [(str(i), w) for i, w in enumerate(weights)]
    low, high = sorted((u, v))
    first, second = int(pick(named, low)), int(pick(named, high))
    assert weights[first] > 0
    assert weights[second] > 0
    assert first <= second


@pytest.mark.parametrize(
    ("weights", "u", "message"),
    [
        ([("a", 1.0)], 1.0, r"u must lie in \[0, 1\), not 1.0"),
        ([("a", 1.0)], -0.1, r"u must lie in \[0, 1\)"),
        ([("a", -1.0), ("b", 2.0)], 0.5, "weight of 'a' must be zero or more, not -1.0"),
        ([("a", math.nan)], 0.5, "weight of 'a' must be zero or more, not nan"),
        ([("a", 0.0), ("b", 0.0)], 0.5, "positive, finite total, not 0.0"),
        ([], 0.5, "positive, finite total"),
        ([("a", math.inf)], 0.5, "positive, finite total, not inf"),
    ],
)
def test_bad_picks_are_refused(weights: list[tuple[str, float]], u: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pick(weights, u)
