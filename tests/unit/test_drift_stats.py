"""Drift statistics against scipy's own functions on fixed samples, and PSI by its formula."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.spatial.distance import jensenshannon

from inferd.monitoring.drift.stats import (
    SortedReference,
    bin_counts,
    categorical_tests,
    ks_pvalue,
    ks_statistic,
    ks_statistics,
    mmd_test,
    psi,
    psis,
    rbf_bandwidth,
    wasserstein,
    wassersteins,
)

rng = np.random.default_rng(20)
SAMPLES = [
    (rng.normal(size=1000), rng.normal(0.1, size=7500)),
    (np.round(rng.normal(size=37), 1), np.round(rng.normal(size=50), 1)),  # many ties
    (rng.exponential(size=200), rng.exponential(1.3, size=300)),
    (np.array([1.0, 1.0, 1.0, 2.0]), np.array([1.0, 2.0, 2.0, 3.0, 3.0])),
    (rng.normal(size=500), rng.normal(size=500)),
]


@pytest.mark.parametrize(("live", "ref"), SAMPLES)
def test_ks_statistic_is_ks_2samp(live: np.ndarray, ref: np.ndarray) -> None:
    expected = stats.ks_2samp(live, ref, method="asymp")
    d = ks_statistic(np.sort(live), SortedReference.of(ref))
    assert d == pytest.approx(float(expected.statistic), abs=1e-12)


@pytest.mark.parametrize(("live", "ref"), [s for s in SAMPLES if s[0].size >= 30])
def test_ks_pvalue_is_close_to_ks_2samp(live: np.ndarray, ref: np.ndarray) -> None:
    expected = float(stats.ks_2samp(live, ref, method="asymp").pvalue)
    d = ks_statistic(np.sort(live), SortedReference.of(ref))
    p = float(ks_pvalue(d, live.size, ref.size))
    assert p == pytest.approx(expected, rel=0.05, abs=1e-3)


def test_ks_pvalues_are_vectorised_over_features() -> None:
    p = ks_pvalue(np.array([0.02, 0.05, 0.1]), np.array([1000, 1000, 500]), np.array([7500] * 3))
    assert p.shape == (3,)
    assert p[0] > p[1] > p[2]


@pytest.mark.parametrize(("live", "ref"), SAMPLES)
def test_wasserstein_is_scipys(live: np.ndarray, ref: np.ndarray) -> None:
    expected = stats.wasserstein_distance(live, ref)
    assert wasserstein(np.sort(live), SortedReference.of(ref)) == pytest.approx(expected, rel=1e-9)


def test_reference_drops_nan_and_refuses_an_empty_one() -> None:
    ref = SortedReference.of(np.array([3.0, np.nan, 1.0]))
    assert ref.values.tolist() == [1.0, 3.0]
    with pytest.raises(ValueError, match="not NaN"):
        SortedReference.of(np.array([np.nan]))


def test_psi_is_its_formula() -> None:
    p = np.array([50.0, 30.0, 20.0])
    q = np.array([40.0, 35.0, 25.0])
    pp, qq = p / p.sum(), q / q.sum()
    assert psi(p, q) == pytest.approx(float(np.sum((qq - pp) * np.log(qq / pp))))
    assert psi(p, p) == 0.0
    assert np.isfinite(psi(np.array([10.0, 0.0]), np.array([5.0, 5.0])))  # empty bin floored


def test_psi_of_a_quarter_sd_shift_stays_under_the_convention() -> None:
    # the reason KS carries the small shifts: PSI ~ shift^2 for a normal feature
    ref = rng.normal(size=20_000)
    edges = np.quantile(ref, np.linspace(0.1, 0.9, 9))
    counts = np.bincount(np.searchsorted(edges, ref), minlength=10).astype(float)
    shifted = np.bincount(np.searchsorted(edges, ref + 0.25), minlength=10).astype(float)
    assert 0.03 < psi(counts, shifted) < 0.2


def test_categorical_tests_are_scipys() -> None:
    ref = np.array([50.0, 30.0, 20.0, 0.0])  # the last bin: categories the reference lacks
    live = np.array([40.0, 35.0, 20.0, 5.0])
    value, p, js = categorical_tests(ref, live)
    shares = np.maximum(ref / ref.sum(), 1e-4)
    shares /= shares.sum()
    assert p == pytest.approx(float(stats.chisquare(live, shares * live.sum()).pvalue))
    assert js == pytest.approx(float(jensenshannon(ref, live, base=2.0)))
    assert value == pytest.approx(psi(ref, live))
    _, same_p, same_js = categorical_tests(ref, ref / 2)
    assert same_p == pytest.approx(1.0, abs=1e-3)
    assert same_js == pytest.approx(0.0, abs=1e-7)


def _biased_mmd(x: np.ndarray, y: np.ndarray, bandwidth: float) -> float:
    def k(a: np.ndarray, b: np.ndarray) -> float:
        d = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return float(np.exp(-d / (2 * bandwidth**2)).mean())

    return k(x, x) + k(y, y) - 2 * k(x, y)


def test_mmd_statistic_and_its_permutation_test() -> None:
    gen = np.random.default_rng(3)
    ref = gen.normal(size=(150, 6))
    same = gen.normal(size=(150, 6))
    shifted = gen.normal(size=(150, 6)) + 0.4
    bandwidth = rbf_bandwidth(ref)
    mmd_same, p_same = mmd_test(ref, same, bandwidth, 199)
    mmd_shift, p_shift = mmd_test(ref, shifted, bandwidth, 199)
    assert mmd_same == pytest.approx(_biased_mmd(ref, same, bandwidth))
    assert mmd_shift == pytest.approx(_biased_mmd(ref, shifted, bandwidth))
    assert p_same > 0.05
    assert p_shift == pytest.approx(1 / 200)  # no permutation came near: the smallest p


def test_column_wise_statistics_are_the_single_ones() -> None:
    gen = np.random.default_rng(8)
    live = np.round(gen.normal(size=(4, 300)), 1)  # ties inside and across the samples
    ref = np.round(gen.normal(0.2, size=(4, 500)), 1)
    live[3] = gen.normal(size=300)  # one row without ties
    live_sorted, ref_sorted = np.sort(live, axis=1), np.sort(ref, axis=1)
    d = ks_statistics(live_sorted, ref_sorted)
    w = wassersteins(live_sorted, ref_sorted)
    for j in range(4):
        one = SortedReference.of(ref[j])
        assert d[j] == pytest.approx(ks_statistic(live_sorted[j], one), abs=1e-12)
        assert d[j] == pytest.approx(float(stats.ks_2samp(live[j], ref[j]).statistic))
        assert w[j] == pytest.approx(wasserstein(live_sorted[j], one), rel=1e-9)
    edges = np.array([[-1.0, 0.0, 1.0], [0.0, 1.0, np.inf]])  # the second: two edges
    counts = bin_counts(live[:2], edges)
    for j in range(2):
        row_edges = edges[j][np.isfinite(edges[j])]
        expected = np.bincount(np.searchsorted(row_edges, live[j]), minlength=4)
        assert counts[j].tolist() == expected.tolist()
    table = np.array([[50.0, 30.0, 20.0], [10.0, 0.0, 5.0]])
    other = np.array([[40.0, 35.0, 25.0], [12.0, 1.0, 2.0]])
    assert psis(table, other).tolist() == pytest.approx(
        [psi(table[0], other[0]), psi(table[1], other[1])]
    )
