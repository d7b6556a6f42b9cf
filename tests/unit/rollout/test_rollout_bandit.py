"""Thompson sampling: it finds the better arm, keeps its floor, and says what it will do."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.rollout.bandit import ThompsonSampler


def run(sampler: ThompsonSampler, rates: dict[str, float], pulls: int, seed: int) -> list[str]:
    """Pull ``pulls`` times with Bernoulli rewards of the given rates; the arms chosen."""
    world = random.Random(seed)
    chosen = []
    for _ in range(pulls):
        arm = sampler.choose()
        sampler.reward(arm, 1.0 if world.random() < rates[arm] else 0.0)
        chosen.append(arm)
    return chosen


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_binary_rewards_move_traffic_to_the_better_arm(seed: int) -> None:
    sampler = ThompsonSampler(["a", "b"], kind="binary", seed=seed)
    chosen = run(sampler, {"a": 0.05, "b": 0.10}, 4000, seed=100 + seed)
    late = Counter(chosen[-1000:])
    assert late["b"] > 700, late
    assert sampler.shares()["b"] > 0.7
    stats = sampler.stats()
    assert stats["a"].count + stats["b"].count == 4000
    assert stats["b"].count > stats["a"].count


def test_continuous_rewards_move_traffic_to_the_better_arm() -> None:
    sampler = ThompsonSampler(["a", "b", "c"], kind="continuous", seed=5)
    world = random.Random(6)
    means = {"a": 1.0, "b": 1.2, "c": 0.9}
    chosen = []
    for _ in range(3000):
        arm = sampler.choose()
        sampler.reward(arm, world.gauss(means[arm], 1.0))
        chosen.append(arm)
    assert Counter(chosen[-1000:])["b"] > 700
    assert sampler.shares()["b"] > 0.7
    assert sampler.stats()["b"].mean == pytest.approx(1.2, abs=0.1)


def test_a_fresh_sampler_splits_evenly() -> None:
    sampler = ThompsonSampler(["a", "b", "c", "d"], kind="binary", seed=0)
    counts = Counter(sampler.choose() for _ in range(8000))
    assert all(1800 < counts[arm] < 2200 for arm in "abcd"), counts
    assert all(s == pytest.approx(0.25, abs=0.04) for s in sampler.shares().values())


def test_choices_follow_the_shares_it_reports() -> None:
    sampler = ThompsonSampler(["a", "b"], kind="binary", seed=9)
    for arm, successes, n in (("a", 5, 50), ("b", 8, 50)):
        for i in range(n):
            sampler.reward(arm, 1.0 if i < successes else 0.0)
    shares = sampler.shares(draws=20000)
    counts = Counter(sampler.choose() for _ in range(20000))
    assert counts["b"] / 20000 == pytest.approx(shares["b"], abs=0.02)
    assert 0.6 < shares["b"] < 0.9  # neither a coin toss nor settled


@pytest.mark.parametrize("kind", ["binary", "continuous"])
def test_the_floor_keeps_every_arm_in_play(kind: str) -> None:
    floor = 0.05
    sampler = ThompsonSampler(["a", "b", "c"], kind=kind, seed=4, min_share=floor)  # type: ignore[arg-type]
    for _ in range(500):  # "b" is plainly the best
        sampler.reward("a", 0.0)
        sampler.reward("b", 1.0)
        sampler.reward("c", 0.0)
    shares = sampler.shares()
    assert shares["a"] == pytest.approx(floor, abs=0.005)
    assert shares["c"] == pytest.approx(floor, abs=0.005)
    assert shares["b"] == pytest.approx(1 - 2 * floor, abs=0.01)
    counts = Counter(sampler.choose() for _ in range(20000))
    for arm in "ac":  # binomial standard deviation of a 5% share of 20,000: 0.0015
        assert counts[arm] / 20000 == pytest.approx(floor, abs=0.006)
    unfloored = ThompsonSampler(["a", "b", "c"], kind=kind, seed=4)  # type: ignore[arg-type]
    for _ in range(500):
        unfloored.reward("a", 0.0)
        unfloored.reward("b", 1.0)
    assert unfloored.shares()["a"] < 0.01  # without the floor the loser starves


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 5),
    st.sampled_from(["binary", "continuous"]),
    st.lists(st.tuples(st.integers(0, 4), st.floats(0.0, 1.0)), max_size=40),
    st.floats(0.0, 0.2),
)
def test_shares_sum_to_one(
    arms: int, kind: str, rewards: list[tuple[int, float]], floor: float
) -> None:
    names = [f"v{i}" for i in range(arms)]
    sampler = ThompsonSampler(names, kind=kind, seed=1, min_share=min(floor, 1 / arms))  # type: ignore[arg-type]
    for i, value in rewards:
        sampler.reward(names[i % arms], value)
    shares = sampler.shares(draws=500)
    assert list(shares) == names
    assert math.fsum(shares.values()) == pytest.approx(1.0)
    assert all(s >= sampler.min_share - 1e-12 for s in shares.values())
    assert sampler.choose() in names


def test_equal_seeds_choose_alike() -> None:
    first = ThompsonSampler(["a", "b", "c"], kind="binary", seed=42)
    second = ThompsonSampler(["a", "b", "c"], kind="binary", seed=42)
    assert run(first, {"a": 0.1, "b": 0.2, "c": 0.3}, 300, seed=1) == run(
        second, {"a": 0.1, "b": 0.2, "c": 0.3}, 300, seed=1
    )


def test_an_unknown_arm_is_named_in_the_error() -> None:
    sampler = ThompsonSampler(["a", "b"], kind="binary", seed=0)
    with pytest.raises(ValueError, match=r"unknown arm 'z': this bandit's arms are \['a', 'b'\]"):
        sampler.reward("z", 1.0)


def test_bad_rewards_are_refused() -> None:
    binary = ThompsonSampler(["a"], kind="binary", seed=0)
    with pytest.raises(ValueError, match=r"a binary reward must lie in \[0, 1\], not 2"):
        binary.reward("a", 2.0)
    continuous = ThompsonSampler(["a"], kind="continuous", seed=0)
    continuous.reward("a", 250.0)  # any finite number
    with pytest.raises(ValueError, match="a reward must be a finite number"):
        continuous.reward("a", math.nan)
    assert continuous.stats()["a"].count == 1


@pytest.mark.parametrize(
    ("arms", "kwargs", "message"),
    [
        ([], {}, "at least one arm"),
        (["a", "a"], {}, "distinct names"),
        (["a", "b"], {"kind": "gaussian"}, "kind must be 'binary' or 'continuous'"),
        (["a", "b", "c"], {"min_share": 0.4}, r"min_share must lie in \[0, 1/3\]"),
        (["a"], {"min_share": -0.1}, "min_share must lie"),
    ],
)
def test_bad_settings_are_refused(arms: list[str], kwargs: dict[str, object], message: str) -> None:
    settings_ = {"kind": "binary", "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=message):
        ThompsonSampler(arms, **settings_)  # type: ignore[arg-type]


def test_stats_are_copies() -> None:
    sampler = ThompsonSampler(["a", "b"], kind="binary", seed=0)
    sampler.reward("a", 1.0)
    sampler.stats()["a"].add(0.0)
    assert sampler.stats()["a"].count == 1
    assert sampler.arms == ("a", "b")
    assert sampler.kind == "binary"
