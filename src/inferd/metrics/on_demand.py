"""On-demand loading metrics (``inferd_model_*``): loads, evictions, resident bytes, the budget
and load latency, read from the on-demand loader's snapshot at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from inferd.metrics.models import cumulative_buckets
from inferd.repository.on_demand import OnDemandStats

__all__ = ["OnDemandCollector"]


class OnDemandCollector(Collector):
    def __init__(self, read: Callable[[], OnDemandStats | None]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        stats = self._read()
        if stats is None:
            return
        loads = CounterMetricFamily(
            "inferd_model_loads",
            "Models loaded by the on-demand loader, by reason (startup, first_request, "
            "after_eviction)",
            labels=["reason"],
        )
        for reason in ("startup", "first_request", "after_eviction"):
            loads.add_metric([reason], stats.loads.get(reason, 0))
        yield loads
        yield CounterMetricFamily(
            "inferd_model_evictions",
            "Idle models unloaded to make room within the memory budget",
            value=stats.evictions,
        )
        yield CounterMetricFamily(
            "inferd_model_eviction_thrash",
            "Loads that found no room because the models that could make it were loaded less "
            "than --model-min-residency-secs ago (two busy models not fitting together)",
            value=stats.thrash_refusals,
        )
        yield CounterMetricFamily(
            "inferd_model_eviction_deferrals",
            "Loads that waited for a busy model to finish serving because unloading it then "
            "would cost fewer reloads than the idle models that could leave at once",
            value=stats.deferrals,
        )
        resident = GaugeMetricFamily(
            "inferd_model_resident_bytes",
            "Memory a loaded model holds: its largest measured resident-set growth at a load, "
            "at least its size on disk",
            labels=["model"],
        )
        for name, size in sorted(stats.resident_bytes.items()):
            resident.add_metric([name], size)
        yield resident
        if stats.budget_bytes is not None:
            yield GaugeMetricFamily(
                "inferd_model_memory_budget_bytes",
                "The memory budget of the server and its models (--model-memory-budget)",
                value=stats.budget_bytes,
            )
        yield GaugeMetricFamily(
            "inferd_model_memory_baseline_bytes",
            "The server's own resident set before its first on-demand load (counted in the budget)",
            value=stats.baseline_bytes,
        )
        latency = HistogramMetricFamily(
            "inferd_model_load_duration_seconds",
            "Time an on-demand load took (warm-up included), by runtime",
            labels=["runtime"],
        )
        for runtime, histogram in sorted(stats.load_seconds.items()):
            latency.add_metric([runtime], cumulative_buckets(histogram), histogram.total)
        yield latency
