"""The server's own health as a Prometheus metric, read at scrape time:
``inferd_server_ready`` is what ``/v2/health/ready`` answers."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["HealthCollector"]


class HealthCollector(Collector):
    def __init__(self, ready: Callable[[], bool]) -> None:
        self._ready = ready

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "inferd_server_ready",
            "1 while the server answers ready (every expected model loaded, not shutting down)",
            value=1.0 if self._ready() else 0.0,
        )
