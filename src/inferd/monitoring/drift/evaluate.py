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

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from inferd.core.drift import DriftSettings, FeatureDrift, VersionDrift
from inferd.monitoring.drift.alerts import AlertState, step
from inferd.monitoring.drift.stats import (
    SortedReference,
    categorical_tests,
    ks_pvalue,
    ks_statistic,
    mmd_test,
    psi,
    rbf_bandwidth,
    wasserstein,
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


class Evaluator:
    """The statistics state of one version: sorted references, alert states, last results."""

    def __init__(
        self,
        window: VersionWindow,
        settings: DriftSettings,
        pause: Callable[[], None] = lambda: None,
    ) -> None:
        """``pause`` is called between features: the monitor's thread lets the event loop
        run there, so a request never waits for a whole evaluation."""
        self._settings = settings
        self._pause = pause
        self._columns: dict[tuple[str, int], _Column] = {}
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
        present = (~np.isnan(rows)).sum(axis=0)
        ordered = np.sort(rows, axis=0)  # NaN last
        found: list[tuple[int, Array, _Column, float]] = []
        for j, i in enumerate(tw.numeric):
            live = ordered[: present[j], j]
            column = self._columns[name, i]
            found.append((i, live, column, ks_statistic(live, column.ref) if live.size else 0.0))
            self._pause()
        pvalues = ks_pvalue(
            np.asarray([d for *_, d in found]),
            np.asarray([max(1, live.size) for _, live, _, _ in found]),
            np.asarray([column.ref.values.size for _, _, column, _ in found]),
        )
        s, level = self._settings, self.level
        for (i, live, column, d), p in zip(found, pvalues, strict=True):
            feature = tw.profile.columns[i].feature
            if not live.size:  # every value NaN: data quality, not drift
                alert = self._alert(name, feature, False, False)
                self._last[name, feature] = FeatureDrift(
                    feature, name, tw.profile.role, "numeric", alert=alert
                )
                continue
            bins = np.bincount(
                np.searchsorted(column.edges, live, side="left"), minlength=len(column.counts)
            )
            value = psi(column.counts, bins.astype(np.float64))
            drifting = bool(p < level or value > s.psi_threshold)
            calm = bool(p >= level and value < s.psi_clear)
            self._last[name, feature] = FeatureDrift(
                feature,
                name,
                tw.profile.role,
                "numeric",
                psi=value,
                ks_statistic=d,
                ks_pvalue=float(p),
                wasserstein=wasserstein(live, column.ref),
                drifting=drifting,
                alert=self._alert(name, feature, drifting, calm),
            )
            self._pause()

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
            self._pause()

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
