"""The server's own health as Prometheus metrics, read at scrape time:
``inferd_server_ready`` is what ``/v2/health/ready`` answers, and
``inferd_model_load_failures_total`` counts failed model loads per model."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["HealthCollector"]


class HealthCollector(Collector):
    def __init__(
        self, ready: Callable[[], bool], load_failures: Callable[[], Mapping[str, int]]
    ) -> None:
        self._ready = ready
        self._load_failures = load_failures

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "inferd_server_ready",
            "1 while the server answers ready (every expected model loaded, not shutting down)",
            value=1.0 if self._ready() else 0.0,
        )
        failures = CounterMetricFamily(
            "inferd_model_load_failures",
            "Failed model loads: versions that failed to load (a failed reload of a version "
            "that keeps serving too) and loads that failed before any version",
            labels=["model"],
        )
        for model, count in sorted(self._load_failures().items()):
            failures.add_metric([model], count)
        yield failures
