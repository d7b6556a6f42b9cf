"""Drift and data-quality metrics (``inferd_drift_*``, ``inferd_data_quality_*``), read from
the drift monitor's snapshot at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inferd.core.drift import FeatureDrift, MonitorStatistics

__all__ = ["DriftCollector"]

_VERSION = ["model", "version"]
_FEATURE = ["model", "version", "feature", "tensor", "role"]

# (metric, help, FeatureDrift attribute): gauges of the last evaluation, absent until computed
_STATISTICS = (
    ("inferd_drift_psi", "Population stability index of the window against the profile", "psi"),
    ("inferd_drift_ks_statistic", "Two-sample Kolmogorov-Smirnov statistic", "ks_statistic"),
    ("inferd_drift_ks_pvalue", "Kolmogorov-Smirnov p-value", "ks_pvalue"),
    ("inferd_drift_wasserstein", "Wasserstein-1 distance, in the feature's units", "wasserstein"),
    ("inferd_drift_chi2_pvalue", "Chi-square p-value of a categorical feature", "chi2_pvalue"),
    ("inferd_drift_js_distance", "Jensen-Shannon distance (base 2) of a categorical feature",
     "js_distance"),
    ("inferd_drift_mmd", "Squared MMD of an embedding or image tensor", "mmd"),
    ("inferd_drift_mmd_pvalue", "MMD permutation-test p-value", "mmd_pvalue"),
)  # fmt: skip

# (metric, help, FeatureDrift attribute, the kinds of feature it applies to)
_QUALITY = (
    (
        "inferd_data_quality_nan",
        "Values that were NaN (rows with a NaN, for an embedding or image tensor)",
        "nan",
        ("numeric", "multivariate"),
    ),
    (
        "inferd_data_quality_out_of_range",
        "Numeric values outside the range of the reference profile",
        "out_of_range",
        ("numeric",),
    ),
    (
        "inferd_data_quality_unseen_category",
        "Categorical values outside the categories of the reference profile",
        "unseen",
        ("categorical",),
    ),
)


def _labels(model: str, version: int, f: FeatureDrift) -> list[str]:
    return [model, str(version), f.feature, f.tensor, f.role]


class DriftCollector(Collector):
    def __init__(self, read: Callable[[], MonitorStatistics]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        stats = self._read()
        alert = GaugeMetricFamily(
            "inferd_drift_alert",
            "1 while a feature's drift alert is raised (after hysteresis), else 0",
            labels=_FEATURE,
        )
        gauges = [(GaugeMetricFamily(n, h, labels=_FEATURE), a) for n, h, a in _STATISTICS]
        quality = [(CounterMetricFamily(n, h, labels=_FEATURE), a, k) for n, h, a, k in _QUALITY]
        missing = CounterMetricFamily(
            "inferd_data_quality_missing",
            "Requests that did not carry an optional input of the profile",
            labels=[*_VERSION, "tensor"],
        )
        rows = CounterMetricFamily(
            "inferd_drift_observed_rows", "Rows observed by drift monitoring", labels=_VERSION
        )
        evaluations = CounterMetricFamily(
            "inferd_drift_evaluations", "Evaluations of the drift tests", labels=_VERSION
        )
        window = GaugeMetricFamily(
            "inferd_drift_window_rows", "Rows in the sliding window", labels=_VERSION
        )
        for v in stats.versions:
            key = [v.model, str(v.version)]
            rows.add_metric(key, v.rows)
            evaluations.add_metric(key, v.evaluations)
            window.add_metric(key, v.window_rows)
            for tensor, count in v.missing.items():
                missing.add_metric([*key, tensor], count)
            for f in v.features:
                labels = _labels(v.model, v.version, f)
                alert.add_metric(labels, 1.0 if f.alert else 0.0)
                for family, attr in gauges:
                    value = getattr(f, attr)
                    if value is not None:
                        family.add_metric(labels, value)
                for counter, attr, kinds in quality:
                    if f.kind in kinds:
                        counter.add_metric(labels, getattr(f, attr))
        yield alert
        yield from (family for family, _ in gauges)
        yield from (counter for counter, _, _ in quality)
        yield missing
        yield rows
        yield evaluations
        yield window
        yield CounterMetricFamily(
            "inferd_drift_dropped_requests",
            "Answered requests drift monitoring skipped because its queue was full",
            value=stats.dropped,
        )
        yield CounterMetricFamily(
            "inferd_drift_failed_requests",
            "Answered requests drift monitoring failed to process (see the server log)",
            value=stats.failures,
        )
        yield GaugeMetricFamily(
            "inferd_drift_queued_requests",
            "Answered requests waiting for the drift monitor's worker",
            value=stats.queued,
        )
