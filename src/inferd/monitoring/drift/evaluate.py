"""One evaluation of a version's windows against its profile: statistics, then alerts.

Every numeric feature gets PSI (over the reference's decile bins), the KS statistic and
p-value and the Wasserstein-1 distance; every categorical feature PSI, a chi-square p-value and
the Jensen-Shannon distance; every embedding or image tensor an MMD permutation test. A feature
drifts when a p-value falls under its level (``alpha`` split evenly over the version's
univariate tests: Bonferroni) or PSI exceeds its threshold; the alert then follows
:mod:`.alerts`' hysteresis. A tensor is tested only once its window is full.

The worker publishes a :class:`Published` record after every batch of requests: the last
results as they are and copies of the counters, cheap to make; the :class:`VersionDrift` the
metrics and the report read is built from it only when they ask.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from inferd.core.drift import DriftSettings, FeatureDrift, VersionDrift
from inferd.monitoring.drift.alerts import AlertState, step
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
from inferd.monitoring.drift.window import TensorWindow, VersionWindow

__all__ = ["Evaluator", "Published"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Published:
    """What the worker last knew of a version; :meth:`build` makes the snapshot."""

    model: str
    version: int
    profile_rows: int
    rows: int
    requests: int
    window_rows: int
    evaluations: int
    tests: int
    missing: dict[str, int]
    results: tuple[FeatureDrift, ...]  # the last evaluation, counts left at zero
    counts: tuple[tuple[int, int, int], ...]  # (nan, out of range, unseen) per feature

    def build(self) -> VersionDrift:
        features = tuple(
            replace(result, nan=nan, out_of_range=oor, unseen=unseen)
            for result, (nan, oor, unseen) in zip(self.results, self.counts, strict=True)
        )
        return VersionDrift(
            model=self.model,
            version=self.version,
            profile_rows=self.profile_rows,
            rows=self.rows,
            requests=self.requests,
            window_rows=self.window_rows,
            evaluations=self.evaluations,
            tests=self.tests,
            missing=self.missing,
            features=features,
        )


@dataclass(frozen=True)
class _Column:
    """A numeric column's reference, arranged once for the tests."""

    ref: SortedReference
    edges: Array
    counts: Array


@dataclass(frozen=True)
class _Block:
    """A tensor's numeric columns whose references have the same size, side by side, so that
    their tests run as a few operations on matrices instead of a loop over columns."""

    positions: Array  # their places among the tensor's numeric columns
    refs: Array  # k x m, each row ascending
    edges: Array  # k x e, padded with +inf
    counts: Array  # k x (e + 1), padded with 0


def _block(columns: list[tuple[int, _Column]]) -> _Block | None:
    sizes = [c.ref.values.size for _, c in columns]
    if not sizes:
        return None
    common = max(set(sizes), key=sizes.count)
    chosen = [(j, c) for j, c in columns if c.ref.values.size == common]
    depth = max(c.edges.size for _, c in chosen)
    edges = np.full((len(chosen), depth), np.inf)
    counts = np.zeros((len(chosen), depth + 1))
    for k, (_, c) in enumerate(chosen):
        edges[k, : c.edges.size] = c.edges
        counts[k, : c.counts.size] = c.counts
    return _Block(
        np.asarray([j for j, _ in chosen]),
        np.vstack([c.ref.values for _, c in chosen]),
        edges,
        counts,
    )


class Evaluator:
    """The statistics state of one version: sorted references, alert states, last results."""

    def __init__(self, window: VersionWindow, settings: DriftSettings) -> None:
        self._settings = settings
        self._columns: dict[tuple[str, int], _Column] = {}
        self._blocks: dict[str, _Block | None] = {}
        self._bandwidth: dict[str, float] = {}
        self._states: dict[tuple[str, str], AlertState] = {}
        # by (tensor, feature): column names from a data file may repeat across tensors
        self._last: dict[tuple[str, str], FeatureDrift] = {}
        self._order: list[tuple[str, str]] = []
        tests = 0
        for name, tw in window.tensors.items():
            mv = tw.profile.multivariate
            if mv is not None:
                self._bandwidth[name] = rbf_bandwidth(np.asarray(mv.sample))
                self._blank(name, name, tw.profile.role, "multivariate")
                continue
            for i in tw.numeric:
                column = tw.profile.columns[i]
                self._columns[name, i] = _Column(
                    SortedReference.of(np.asarray(column.sample)),
                    np.asarray(column.edges, dtype=np.float64),
                    np.asarray(column.counts, dtype=np.float64),
                )
                self._blank(name, column.feature, tw.profile.role, "numeric")
            self._blocks[name] = _block(
                [(j, self._columns[name, i]) for j, i in enumerate(tw.numeric)]
            )
            for i in tw.categorical:
                self._blank(name, tw.profile.columns[i].feature, tw.profile.role, "categorical")
            tests += len(tw.numeric) + len(tw.categorical)
        self.tests = tests
        self.evaluations = 0
        self._results = tuple(self._last[key] for key in self._order)

    def _blank(self, tensor: str, feature: str, role: str, kind: str) -> None:
        self._order.append((tensor, feature))
        self._last[tensor, feature] = FeatureDrift(feature, tensor, role, kind)

    @property
    def level(self) -> float:
        return self._settings.alpha / max(1, self.tests)

    def evaluate(self, window: VersionWindow) -> None:
        """Run every test whose window is full, and move each feature's alert."""
        self.evaluations += 1
        window.since_evaluation = 0
        for name, tw in window.tensors.items():
            ring = tw.projected or tw.values or tw.codes
            if ring is None or ring.filled < ring.capacity:
                continue
            if tw.projected is not None:
                self._multivariate(name, tw)
                continue
            if tw.values is not None:
                self._numeric(name, tw)
            if tw.codes is not None:
                self._categorical(tw)
        self._results = tuple(self._last[key] for key in self._order)

    def _alert(self, tensor: str, feature: str, drifting: bool, calm: bool) -> bool:
        s = self._settings
        key = (tensor, feature)
        state = step(
            self._states.get(key, AlertState()),
            drifting=drifting,
            calm=calm,
            raise_after=s.raise_after,
            clear_after=s.clear_after,
        )
        self._states[key] = state
        return state.alert

    def _numeric(self, name: str, tw: TensorWindow) -> None:
        assert tw.values is not None
        rows = tw.values.rows()
        n = len(rows)
        present = (~np.isnan(rows)).sum(axis=0)
        ordered = np.sort(np.ascontiguousarray(rows.T), axis=1)  # a row per feature, NaN last
        count = len(tw.numeric)
        d = np.zeros(count)
        w = np.zeros(count)
        value = np.zeros(count)
        sizes = np.ones(count, dtype=np.int64)
        done = np.zeros(count, dtype=bool)
        block = self._blocks.get(name)
        if block is not None:
            whole = present[block.positions] == n  # columns without NaN: tested together
            if whole.all():
                at, refs, edges, counts = block.positions, block.refs, block.edges, block.counts
            else:
                at, refs = block.positions[whole], block.refs[whole]
                edges, counts = block.edges[whole], block.counts[whole]
            if at.size:
                live = ordered[at]
                d[at] = ks_statistics(live, refs)
                w[at] = wassersteins(live, refs)
                value[at] = psis(counts, bin_counts(live, edges).astype(np.float64))
                sizes[at] = n
                done[at] = True
        for j, i in enumerate(tw.numeric):
            if done[j] or not present[j]:
                continue
            live = ordered[j, : present[j]]
            column = self._columns[name, i]
            bins = np.bincount(
                np.searchsorted(column.edges, live, side="left"), minlength=len(column.counts)
            )
            d[j] = ks_statistic(live, column.ref)
            w[j] = wasserstein(live, column.ref)
            value[j] = psi(column.counts, bins.astype(np.float64))
            sizes[j] = live.size
        references = [self._columns[name, i].ref.values.size for i in tw.numeric]
        pvalues = ks_pvalue(d, sizes, np.asarray(references))
        s, level = self._settings, self.level
        for j, i in enumerate(tw.numeric):
            feature = tw.profile.columns[i].feature
            if not present[j]:  # every value NaN: data quality, not drift
                alert = self._alert(name, feature, False, False)
                self._last[name, feature] = FeatureDrift(
                    feature, name, tw.profile.role, "numeric", alert=alert
                )
                continue
            p = float(pvalues[j])
            drifting = bool(p < level or value[j] > s.psi_threshold)
            calm = bool(p >= level and value[j] < s.psi_clear)
            self._last[name, feature] = FeatureDrift(
                feature,
                name,
                tw.profile.role,
                "numeric",
                psi=float(value[j]),
                ks_statistic=float(d[j]),
                ks_pvalue=p,
                wasserstein=float(w[j]),
                drifting=drifting,
                alert=self._alert(name, feature, drifting, calm),
            )

    def _categorical(self, tw: TensorWindow) -> None:
        assert tw.codes is not None
        codes = tw.codes.rows()
        s, level, name = self._settings, self.level, tw.profile.name
        for j, i in enumerate(tw.categorical):
            column = tw.profile.columns[i]
            live = np.bincount(codes[:, j], minlength=len(column.counts)).astype(np.float64)
            value, p, js = categorical_tests(np.asarray(column.counts, dtype=np.float64), live)
            drifting = bool(p < level or value > s.psi_threshold)
            calm = bool(p >= level and value < s.psi_clear)
            self._last[name, column.feature] = FeatureDrift(
                column.feature,
                name,
                tw.profile.role,
                "categorical",
                psi=value,
                chi2_pvalue=p,
                js_distance=js,
                drifting=drifting,
                alert=self._alert(name, column.feature, drifting, calm),
            )

    def _multivariate(self, name: str, tw: TensorWindow) -> None:
        assert tw.projected is not None
        assert tw.profile.multivariate is not None
        s = self._settings
        mmd, p = mmd_test(
            np.asarray(tw.profile.multivariate.sample),
            tw.projected.rows(),
            self._bandwidth[name],
            s.permutations,
            seed=self.evaluations,
        )
        drifting = p <= s.mmd_alpha
        self._last[name, name] = FeatureDrift(
            name,
            name,
            tw.profile.role,
            "multivariate",
            mmd=mmd,
            mmd_pvalue=p,
            drifting=drifting,
            alert=self._alert(name, name, drifting, not drifting),
        )

    def publish(self, window: VersionWindow, model: str, version: int) -> Published:
        """The version as of now, for the metrics and the report (cheap: copies of counts)."""
        counts: list[tuple[int, int, int]] = []
        missing: dict[str, int] = {}
        for tw in window.tensors.values():
            if tw.missing:
                missing[tw.profile.name] = tw.missing
            if tw.profile.multivariate is not None:
                counts.append((int(tw.nan[0]), 0, 0))
                continue
            nan, out = tw.nan.tolist(), tw.out_of_range.tolist()
            counts += [(nan[i], oor, 0) for i, oor in zip(tw.numeric, out, strict=True)]
            counts += [(0, 0, unseen) for unseen in tw.unseen.tolist()]
        return Published(
            model=model,
            version=version,
            profile_rows=window.profile.rows,
            rows=window.rows,
            requests=window.requests,
            window_rows=max((tw.filled for tw in window.tensors.values()), default=0),
            evaluations=self.evaluations,
            tests=self.tests,
            missing=missing,
            results=self._results,
            counts=tuple(counts),
        )

    def snapshot(self, window: VersionWindow, model: str, version: int) -> VersionDrift:
        """:meth:`publish`, built."""
        return self.publish(window, model, version).build()
