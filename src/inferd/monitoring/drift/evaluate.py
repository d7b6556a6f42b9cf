"""One evaluation of a version's windows against its profile: statistics, then alerts.

Every numeric feature gets PSI (over the reference's decile bins), the KS statistic and
p-value and the Wasserstein-1 distance; every categorical feature PSI, a chi-square p-value and
the Jensen-Shannon distance; every embedding or image tensor an MMD permutation test. A feature
drifts when a p-value falls under its level (``alpha`` split evenly over the version's
univariate tests: Bonferroni) or PSI exceeds its threshold; the alert then follows
:mod:`.alerts`' hysteresis. A tensor is tested only once its window is full.
"""

from __future__ import annotations

from dataclasses import replace
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

__all__ = ["Evaluator"]

Array = np.ndarray[Any, Any]


class Evaluator:
    """The statistics state of one version: sorted references, alert states, last results."""

    def __init__(self, window: VersionWindow, settings: DriftSettings) -> None:
        self._settings = settings
        self._refs: dict[tuple[str, int], SortedReference] = {}
        self._bandwidth: dict[str, float] = {}
        # by (tensor, feature): column names from a data file may repeat across tensors
        self._states: dict[tuple[str, str], AlertState] = {}
        self._last: dict[tuple[str, str], FeatureDrift] = {}
        tests = 0
        for name, tw in window.tensors.items():
            mv = tw.profile.multivariate
            if mv is not None:
                self._bandwidth[name] = rbf_bandwidth(np.asarray(mv.sample))
                continue
            for i in tw.numeric:
                self._refs[name, i] = SortedReference.of(np.asarray(tw.profile.columns[i].sample))
            tests += len(tw.numeric) + len(tw.categorical)
        self.tests = tests
        self.evaluations = 0

    @property
    def level(self) -> float:
        return self._settings.alpha / max(1, self.tests)

    def evaluate(self, window: VersionWindow) -> None:
        """Run every test whose window is full, and move each feature's alert."""
        self.evaluations += 1
        window.since_evaluation = 0
        for name, tw in window.tensors.items():
            if tw.filled < (tw.projected or tw.values or tw.codes).capacity:  # type: ignore[union-attr]
                continue
            if tw.projected is not None:
                self._multivariate(name, tw)
                continue
            if tw.values is not None:
                self._numeric(name, tw)
            if tw.codes is not None:
                self._categorical(tw)

    def _decide(self, result: FeatureDrift, drifting: bool, calm: bool) -> None:
        s = self._settings
        key = (result.tensor, result.feature)
        state = step(
            self._states.get(key, AlertState()),
            drifting=bool(drifting),
            calm=bool(calm),
            raise_after=s.raise_after,
            clear_after=s.clear_after,
        )
        self._states[key] = state
        self._last[key] = replace(result, drifting=bool(drifting), alert=state.alert)

    def _numeric(self, name: str, tw: TensorWindow) -> None:
        assert tw.values is not None
        rows = tw.values.rows()
        present = (~np.isnan(rows)).sum(axis=0)
        ordered = np.sort(rows, axis=0)  # NaN last
        columns = [tw.profile.columns[i] for i in tw.numeric]
        ds, ns, ms, partial = [], [], [], []
        for j, (i, column) in enumerate(zip(tw.numeric, columns, strict=True)):
            live = ordered[: present[j], j]
            ref = self._refs[name, i]
            bins = np.bincount(
                np.searchsorted(np.asarray(column.edges), live, side="left"),
                minlength=len(column.counts),
            )
            ds.append(ks_statistic(live, ref))
            ns.append(max(1, live.size))
            ms.append(ref.values.size)
            partial.append(
                FeatureDrift(
                    column.feature,
                    name,
                    tw.profile.role,
                    "numeric",
                    psi=psi(np.asarray(column.counts, dtype=np.float64), bins.astype(np.float64))
                    if live.size
                    else None,
                    ks_statistic=ds[-1] if live.size else None,
                    wasserstein=wasserstein(live, ref) if live.size else None,
                )
            )
        pvalues = ks_pvalue(np.nan_to_num(np.asarray(ds), nan=0.0), np.asarray(ns), np.asarray(ms))
        s, level = self._settings, self.level
        for result, p in zip(partial, pvalues, strict=True):
            value = result.psi
            if result.ks_statistic is None or value is None:
                self._decide(result, False, False)  # every value NaN: data quality, not drift
                continue
            result = replace(result, ks_pvalue=float(p))
            drifting = p < level or value > s.psi_threshold
            calm = p >= level and value < s.psi_clear
            self._decide(result, drifting, calm)

    def _categorical(self, tw: TensorWindow) -> None:
        assert tw.codes is not None
        codes = tw.codes.rows()
        s, level = self._settings, self.level
        for j, i in enumerate(tw.categorical):
            column = tw.profile.columns[i]
            live = np.bincount(codes[:, j], minlength=len(column.counts)).astype(np.float64)
            value, p, js = categorical_tests(np.asarray(column.counts, dtype=np.float64), live)
            result = FeatureDrift(
                column.feature,
                tw.profile.name,
                tw.profile.role,
                "categorical",
                psi=value,
                chi2_pvalue=p,
                js_distance=js,
            )
            drifting = p < level or value > s.psi_threshold
            calm = p >= level and value < s.psi_clear
            self._decide(result, drifting, calm)

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
        result = FeatureDrift(name, name, tw.profile.role, "multivariate", mmd=mmd, mmd_pvalue=p)
        self._decide(result, p <= s.mmd_alpha, p > s.mmd_alpha)

    def snapshot(self, window: VersionWindow, model: str, version: int) -> VersionDrift:
        """What the window and the last evaluation say, for the metrics and the report."""
        features: list[FeatureDrift] = []
        missing: dict[str, int] = {}
        for tw in window.tensors.values():
            if tw.missing:
                missing[tw.profile.name] = tw.missing
            if tw.profile.multivariate is not None:
                features.append(
                    self._with_counts(tw.profile.name, "multivariate", tw, nan=int(tw.nan[0]))
                )
                continue
            for j, i in enumerate(tw.numeric):
                features.append(
                    self._with_counts(
                        tw.profile.columns[i].feature,
                        "numeric",
                        tw,
                        nan=int(tw.nan[i]),
                        out_of_range=int(tw.out_of_range[j]),
                    )
                )
            for j, i in enumerate(tw.categorical):
                features.append(
                    self._with_counts(
                        tw.profile.columns[i].feature,
                        "categorical",
                        tw,
                        nan=0,
                        unseen=int(tw.unseen[j]),
                    )
                )
        return VersionDrift(
            model=model,
            version=version,
            profile_rows=window.profile.rows,
            rows=window.rows,
            requests=window.requests,
            window_rows=max((tw.filled for tw in window.tensors.values()), default=0),
            evaluations=self.evaluations,
            tests=self.tests,
            missing=missing,
            features=tuple(features),
        )

    def _with_counts(
        self,
        feature: str,
        kind: str,
        tw: TensorWindow,
        *,
        nan: int,
        out_of_range: int = 0,
        unseen: int = 0,
    ) -> FeatureDrift:
        name = tw.profile.name
        last = self._last.get((name, feature)) or FeatureDrift(feature, name, tw.profile.role, kind)
        return replace(last, nan=nan, out_of_range=out_of_range, unseen=unseen)
