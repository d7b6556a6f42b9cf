"""Latency distributions of many requests, kept as weighted log-spaced histograms.

Each second, each group of identical pods contributes the requests it answered: either the
replica's own latency distribution at the load it carries (from the capacity curve), or, when
requests queued, the distribution at the replica's peak plus each request's wait. Reading a
percentile back interpolates inside one bin (about 6 % wide).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.tools.scaling.capacity import CapacityCurve

__all__ = ["BIN_EDGES_US", "LEVELS", "LatencyModel", "percentile", "share_above"]

Array = np.ndarray[Any, Any]
BINS_PER_DECADE = 40
BIN_EDGES_US: Array = np.logspace(0, 9, 9 * BINS_PER_DECADE + 1)  # 1 µs .. 1000 s
# the quantile levels one distribution is cut into: an odd count, so that no common percentile
# (p50, p99, p99.9) falls exactly between two of them, where rounding would pick the side
LEVEL_COUNT = 251
LEVELS: Array = (np.arange(LEVEL_COUNT) + 0.5) / LEVEL_COUNT
GRID_POINTS = 128


def _bin_of(values_us: Array) -> Array:
    idx: Array = np.searchsorted(BIN_EDGES_US, values_us, side="right") - 1
    return np.clip(idx, 0, len(BIN_EDGES_US) - 2)


def histogram(values_us: Array, weights: Array) -> Array:
    out: Array = np.bincount(
        _bin_of(values_us), weights=weights, minlength=len(BIN_EDGES_US) - 1
    ).astype(np.float64)
    return out


def percentile(hist: Array, q: float) -> float:
    """The ``q``-th percentile (0-100) of a histogram, NaN when it is empty."""
    total = float(hist.sum())
    if total <= 0:
        return float("nan")
    cum = np.cumsum(hist)
    want = q / 100 * total
    i = int(np.searchsorted(cum, want, side="left"))
    i = min(i, len(hist) - 1)
    before = cum[i - 1] if i > 0 else 0.0
    share = (want - before) / hist[i] if hist[i] > 0 else 0.0
    lo, hi = np.log(BIN_EDGES_US[i]), np.log(BIN_EDGES_US[i + 1])
    return float(np.exp(lo + min(max(share, 0.0), 1.0) * (hi - lo)))


class LatencyModel:
    """The replica's latency histograms on a grid of loads, computed once per curve.

    ``served(rps, weight)`` spreads ``weight`` requests answered at ``rps`` per pod over the two
    nearest grid loads; ``queued(wait_us, weight)`` adds requests that waited ``wait_us`` before
    service at the peak. ``take()`` returns the histogram gathered since the last call.
    """

    def __init__(self, curve: CapacityCurve) -> None:
        self.max_rps = curve.max_rps
        self.grid: Array = np.linspace(0.0, curve.max_rps, GRID_POINTS)
        rows = [
            histogram(curve.quantiles_us(float(r), LEVELS), np.full(LEVEL_COUNT, 1 / LEVEL_COUNT))
            for r in self.grid
        ]
        self._matrix: Array = np.vstack(rows)
        self.peak_quantiles_us: Array = curve.quantiles_us(curve.max_rps, LEVELS)
        self._grid_weights: Array = np.zeros(GRID_POINTS)
        self._direct: Array = np.zeros(len(BIN_EDGES_US) - 1)

    def served(self, rps: float, weight: float) -> None:
        if weight <= 0:
            return
        pos = min(max(rps, 0.0), self.max_rps) / self.max_rps * (GRID_POINTS - 1)
        i = min(int(pos), GRID_POINTS - 2)
        frac = pos - i
        self._grid_weights[i] += weight * (1 - frac)
        self._grid_weights[i + 1] += weight * frac

    def queued(self, wait_us: float, weight: float) -> None:
        if weight <= 0:
            return
        self._direct += histogram(
            self.peak_quantiles_us + wait_us, np.full(len(LEVELS), weight / len(LEVELS))
        )

    def take(self) -> Array:
        hist: Array = self._grid_weights @ self._matrix + self._direct
        self._grid_weights = np.zeros(GRID_POINTS)
        self._direct = np.zeros(len(BIN_EDGES_US) - 1)
        return hist


def share_above(hist: Array, threshold_us: float) -> float:
    """The share of a histogram's requests slower than ``threshold_us`` (0 when empty)."""
    total = float(hist.sum())
    if total <= 0:
        return 0.0
    i = int(_bin_of(np.array([threshold_us]))[0])
    lo, hi = np.log(BIN_EDGES_US[i]), np.log(BIN_EDGES_US[i + 1])
    part = (hi - np.log(max(threshold_us, 1e-9))) / (hi - lo)
    above = float(hist[i + 1 :].sum()) + float(hist[i]) * min(max(float(part), 0.0), 1.0)
    return above / total
