"""The Bayesian comparison: closed forms, symmetry, narrowing, and how often it is fooled."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.rollout.bayes import Comparison, RewardStats, compare

MC_TOLERANCE = 0.015  # > 4 standard errors of a 20,000-draw estimate of a probability


def stats_of(values: list[float] | np.ndarray) -> RewardStats:
    s = RewardStats()
    for v in values:
        s.add(float(v))
    return s


def binary(successes: int, n: int) -> RewardStats:
    """The figures of ``successes`` ones among ``n`` rewards, without adding them one by one."""
    mean = successes / n if n else 0.0
    return RewardStats(n, mean, n * mean * (1.0 - mean))


def beta_pdf(x: np.ndarray, a: float, b: float) -> np.ndarray:
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    return np.exp(log_norm + (a - 1) * np.log(x) + (b - 1) * np.log1p(-x))


def p_b_beats_a(sa: int, na: int, sb: int, nb: int) -> float:
    """P(B > A) for A ~ Beta(1+sa, 1+na-sa), B ~ Beta(1+sb, 1+nb-sb), by the midpoint rule:
    the integral over x of f_A(x) * (1 - F_B(x))."""
    grid = 200_000
    x = (np.arange(grid) + 0.5) / grid
    fa = beta_pdf(x, 1 + sa, 1 + na - sa)
    fb = beta_pdf(x, 1 + sb, 1 + nb - sb)
    cdf_b = np.cumsum(fb) / grid - fb / (2 * grid)  # F_B at each midpoint
    return float(np.sum(fa * (1.0 - cdf_b)) / grid)


# --- RewardStats ---------------------------------------------------------------------------


finite = st.floats(-1e6, 1e6, allow_nan=False)


@given(st.lists(finite, max_size=60))
def test_welford_figures_are_numpys(values: list[float]) -> None:
    s = stats_of(values)
    assert s.count == len(values)
    if values:
        assert s.mean == pytest.approx(np.mean(values), rel=1e-9, abs=1e-6)
        assert s.total == pytest.approx(np.sum(values), rel=1e-9, abs=1e-3)
    if len(values) >= 2:
        assert s.variance == pytest.approx(np.var(values, ddof=1), rel=1e-7, abs=1e-3)
    else:
        assert s.variance == 0.0


@given(st.lists(finite, max_size=40), st.lists(finite, max_size=40))
def test_merged_is_the_figures_of_both_lists(left: list[float], right: list[float]) -> None:
    a, b = stats_of(left), stats_of(right)
    both = a.merged(b)
    whole = stats_of(left + right)
    assert both.count == whole.count
    assert both.mean == pytest.approx(whole.mean, rel=1e-9, abs=1e-6)
    assert both.m2 == pytest.approx(whole.m2, rel=1e-7, abs=1e-2)
    assert (a.count, b.count) == (len(left), len(right))  # the operands are unchanged


def test_successes_count_the_ones_and_the_helper_agrees() -> None:
    s = stats_of([1, 0, 0, 1, 1, 0, 0, 0, 0, 1])
    assert s.successes == pytest.approx(4.0)
    expected = binary(4, 10)
    assert (s.count, s.mean, s.m2) == pytest.approx((expected.count, expected.mean, expected.m2))


# --- binary comparison ---------------------------------------------------------------------


def test_the_numerical_integral_knows_a_closed_form() -> None:
    # A ~ U(0, 1), B ~ Beta(2, 1) (density 2x): P(B > A) = integral of 2x * x = 2/3
    assert p_b_beats_a(0, 0, 1, 1) == pytest.approx(2 / 3, abs=1e-6)


@pytest.mark.parametrize(
    ("sa", "na", "sb", "nb"),
    [(0, 0, 0, 0), (0, 0, 1, 1), (3, 10, 7, 10), (10, 100, 15, 100), (50, 1000, 40, 1000)],
)
def test_binary_p_better_is_the_integral(sa: int, na: int, sb: int, nb: int) -> None:
    got = compare(binary(sa, na), binary(sb, nb), kind="binary")
    assert got.p_better == pytest.approx(p_b_beats_a(sa, na, sb, nb), abs=MC_TOLERANCE)
    mean_a, mean_b = (1 + sa) / (2 + na), (1 + sb) / (2 + nb)
    assert got.lift_kind == "relative"
    assert got.expected_lift == pytest.approx((mean_b - mean_a) / mean_a)
    assert (got.baseline_mean, got.candidate_mean) == pytest.approx((mean_a, mean_b))
    assert (got.n_baseline, got.n_candidate) == (na, nb)
    assert got.interval[0] < got.expected_lift < got.interval[1]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 300), st.integers(0, 300), st.data())
def test_swapping_the_variants_gives_one_minus_p(na: int, nb: int, data: st.DataObject) -> None:
    a = binary(data.draw(st.integers(0, na)), na)
    b = binary(data.draw(st.integers(0, nb)), nb)
    forward = compare(a, b, kind="binary")
    backward = compare(b, a, kind="binary")
    assert forward.p_better + backward.p_better == pytest.approx(1.0, abs=2 * MC_TOLERANCE)


def test_equal_inputs_give_equal_answers_and_the_seed_matters() -> None:
    a, b = binary(30, 400), binary(41, 410)
    assert compare(a, b, kind="binary") == compare(a, b, kind="binary")
    assert compare(a, b, kind="binary", seed=7) == compare(a, b, kind="binary", seed=7)
    assert compare(a, b, kind="binary", seed=7) != compare(a, b, kind="binary", seed=8)


@pytest.mark.parametrize("kind", ["binary", "continuous"])
def test_more_data_narrows_the_interval(kind: str) -> None:
    widths = []
    for n in (100, 1000, 10000):
        c = compare(binary(n * 4 // 10, n), binary(n * 9 // 20, n), kind=kind)  # type: ignore[arg-type]
        assert c.lift_kind == "relative"
        widths.append(c.interval[1] - c.interval[0])
    assert widths[0] > 2 * widths[1] > 4 * widths[2]  # about sqrt(10) narrower each time


def test_a_clear_winner_is_certain_and_a_clear_loser_is_not() -> None:
    assert compare(binary(100, 1000), binary(200, 1000), kind="binary").p_better > 0.999
    assert compare(binary(200, 1000), binary(100, 1000), kind="binary").p_better < 0.001


def test_binary_rewards_outside_zero_one_are_refused() -> None:
    with pytest.raises(ValueError, match=r"binary rewards must lie in \[0, 1\]"):
        compare(stats_of([2.0, 3.0]), binary(1, 2), kind="binary")


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="kind must be 'binary' or 'continuous'"):
        compare(binary(1, 2), binary(1, 2), kind="poisson")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="draws must be at least 1"):
        compare(binary(1, 2), binary(1, 2), kind="binary", draws=0)


def test_as_dict_holds_every_field() -> None:
    c = compare(binary(3, 10), binary(5, 10), kind="binary")
    d = c.as_dict()
    assert set(d) == set(Comparison.__slots__)
    assert d["interval"] == list(c.interval)
    assert d["p_better"] == c.p_better


# --- continuous comparison -----------------------------------------------------------------


def test_continuous_p_better_is_the_normal_approximation() -> None:
    rng = np.random.default_rng(3)
    a = stats_of(rng.normal(1.0, 1.0, 2000))
    b = stats_of(rng.normal(1.05, 2.0, 1500))
    got = compare(a, b, kind="continuous")
    # the posterior of a mean from many rewards: normal, centred on the sample mean, var / n
    z = (b.mean - a.mean) / math.sqrt(a.variance / a.count + b.variance / b.count)
    expected = 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
    assert got.p_better == pytest.approx(expected, abs=MC_TOLERANCE + 0.005)
    assert got.lift_kind == "relative"
    assert got.expected_lift == pytest.approx((b.mean - a.mean) / a.mean, rel=0.01)


def test_continuous_works_with_no_or_one_reward() -> None:
    empty = compare(RewardStats(), RewardStats(), kind="continuous")
    assert empty.p_better == pytest.approx(0.5, abs=MC_TOLERANCE)
    assert all(math.isfinite(x) for x in (*empty.interval, empty.expected_lift))
    one = compare(stats_of([2.0]), stats_of([3.0]), kind="continuous")
    assert 0.5 < one.p_better < 0.95  # leaning to the candidate, far from sure
    assert all(math.isfinite(x) for x in one.interval)


def test_a_baseline_near_zero_gives_an_absolute_lift() -> None:
    rng = np.random.default_rng(4)
    a = stats_of(rng.normal(0.0, 1.0, 500))
    b = stats_of(rng.normal(0.5, 1.0, 500))
    got = compare(a, b, kind="continuous")
    assert got.lift_kind == "absolute"
    assert got.expected_lift == pytest.approx(b.mean - a.mean, rel=0.01)
    assert got.interval[0] < 0.5 < got.interval[1]


def test_a_negative_baseline_gives_a_relative_lift_of_the_right_sign() -> None:
    a = stats_of([-10.0, -10.5, -9.5] * 20)
    b = stats_of([-8.0, -8.5, -7.5] * 20)  # higher reward: better, a positive lift
    got = compare(a, b, kind="continuous")
    assert got.lift_kind == "relative"
    assert got.expected_lift == pytest.approx(0.2, rel=0.02)  # the prior pulls a little
    assert got.p_better > 0.999


def test_identical_constant_rewards_are_a_tie() -> None:
    same = stats_of([1.0] * 50)
    assert compare(same, same, kind="continuous").p_better == pytest.approx(0.5, abs=MC_TOLERANCE)


# --- how often it is fooled ----------------------------------------------------------------


def binomial_interval(n: int, p: float, tail: float) -> tuple[int, int]:
    """The smallest lo and largest hi with P(X < lo) <= tail and P(X > hi) <= tail."""
    pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    lo, below = 0, 0.0
    while below + pmf[lo] <= tail:
        below += pmf[lo]
        lo += 1
    hi, above = n, 0.0
    while above + pmf[hi] <= tail:
        above += pmf[hi]
        hi -= 1
    return lo, hi


def test_an_aa_test_declares_a_winner_about_five_percent_of_the_time() -> None:
    rng = np.random.default_rng(11)
    experiments, n = 400, 500
    counts = rng.binomial(n, 0.1, (experiments, 2))
    wins = sum(
        compare(binary(int(sa), n), binary(int(sb), n), kind="binary", draws=4000, seed=i).p_better
        > 0.95
        for i, (sa, sb) in enumerate(counts)
    )
    lo, hi = binomial_interval(experiments, 0.05, 0.001)
    assert lo <= wins <= hi, (wins, lo, hi)


def test_an_ab_test_finds_a_thirty_percent_lift_most_of_the_time() -> None:
    rng = np.random.default_rng(12)
    experiments, n = 200, 3000
    base = rng.binomial(n, 0.10, experiments)
    lifted = rng.binomial(n, 0.13, experiments)
    found = sum(
        compare(binary(int(a), n), binary(int(b), n), kind="binary", draws=4000, seed=i).p_better
        > 0.95
        for i, (a, b) in enumerate(zip(base, lifted, strict=True))
    )
    # the power of this design is about 0.97; 0.85 leaves room for the draw of experiments
    assert found > 0.85 * experiments, found


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3), max_size=30),
    st.lists(st.floats(-1e3, 1e3), max_size=30),
)
def test_any_continuous_rewards_give_a_well_formed_answer(
    left: list[float], right: list[float]
) -> None:
    got = compare(stats_of(left), stats_of(right), kind="continuous", draws=2000)
    assert 0.0 <= got.p_better <= 1.0
    assert got.interval[0] <= got.interval[1]
    assert all(math.isfinite(x) for x in (got.expected_lift, *got.interval))
    assert got.lift_kind in ("relative", "absolute")
