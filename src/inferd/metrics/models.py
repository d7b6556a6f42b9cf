"""Per-model metrics with Triton's names, read from statistics snapshots at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from inferd.core.statistics import Histogram, StatsSnapshot

_LABELS = ["model", "version"]

# counters Triton exposes under their bare names; the exposition drops the "_total" suffix
TRITON_COUNTERS = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_cache_num_hits_per_model",
    "nv_cache_num_misses_per_model",
    "nv_cache_hit_duration_per_model",
    "nv_cache_miss_duration_per_model",
)


def cumulative_buckets(h: Histogram) -> list[tuple[str, float]]:
    """A histogram's buckets as Prometheus wants them: cumulative counts by upper bound."""
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(h.bounds, h.counts, strict=False):
        running += count
        out.append((repr(float(bound)), running))
    out.append(("+Inf", running + h.counts[-1]))
    return out


def _microseconds(attr: str) -> Callable[[StatsSnapshot], float]:
    def read(s: StatsSnapshot) -> float:
        return float(getattr(s, attr).ns) / 1000

    return read


class _TritonCounter(Metric):
    """A counter exposed under its bare name, as Triton does (no ``_total`` suffix)."""

    def __init__(self, name: str, doc: str, extra_label: str | None = None) -> None:
        super().__init__(name, doc, "counter")
        self.name = name  # Metric strips nothing here, but keep the exact name regardless
        self._labels = [*_LABELS, extra_label] if extra_label else list(_LABELS)

    def add(self, values: list[str], value: float) -> None:
        self.add_sample(self.name, dict(zip(self._labels, values, strict=True)), value)


def _cache_counters(snaps: Sequence[StatsSnapshot]) -> Iterator[Metric]:
    """Triton's response-cache counters, for the versions that use the cache (only those)."""
    for name, doc, value in (
        ("nv_cache_num_hits_per_model", "Number of cache hits per model", "hit_count"),
        ("nv_cache_num_misses_per_model", "Number of cache misses per model", "miss_count"),
        (
            "nv_cache_hit_duration_per_model",
            "Total cache hit duration per model, in microseconds",
            "hit_us",
        ),
        (
            "nv_cache_miss_duration_per_model",
            "Total cache miss (insert+lookup) duration per model, in microseconds",
            "miss_us",
        ),
    ):
        family = _TritonCounter(name, doc)
        for s in snaps:
            d = s.cache_hit if value.startswith("hit") else s.cache_miss
            family.add([s.name, s.version], d.count if value.endswith("count") else d.ns / 1000)
        yield family


class ModelCollector(Collector):
    """Reads ``snapshots()`` (every READY model version) each time Prometheus scrapes."""

    def __init__(self, snapshots: Callable[[], Sequence[StatsSnapshot]]) -> None:
        self._snapshots = snapshots

    def collect(self) -> Iterator[Metric]:
        snaps = self._snapshots()

        def counter(name: str, doc: str, value: Callable[[StatsSnapshot], float]) -> Metric:
            family = _TritonCounter(name, doc)
            for s in snaps:
                family.add([s.name, s.version], value(s))
            return family

        yield counter(
            "nv_inference_request_success",
            "Number of successful inference requests, all batch sizes",
            lambda s: s.success.count,
        )
        failure = _TritonCounter(
            "nv_inference_request_failure",
            "Number of failed inference requests, all batch sizes",
            extra_label="reason",
        )
        for s in snaps:
            for reason, count in s.failures.items():
                failure.add([s.name, s.version, reason], count)
        yield failure
        yield counter(
            "nv_inference_count",
            "Number of inferences performed (does not include cached requests)",
            lambda s: s.inference_count,
        )
        yield counter(
            "nv_inference_exec_count",
            "Number of model executions performed (does not include cached requests)",
            lambda s: s.execution_count,
        )
        for name, doc, attr in (
            (
                "nv_inference_request_duration_us",
                "Cumulative inference request duration",
                "success",
            ),
            ("nv_inference_queue_duration_us", "Cumulative inference queuing duration", "queue"),
            (
                "nv_inference_compute_input_duration_us",
                "Cumulative compute input duration",
                "compute_input",
            ),
            (
                "nv_inference_compute_infer_duration_us",
                "Cumulative compute inference duration",
                "compute_infer",
            ),
            (
                "nv_inference_compute_output_duration_us",
                "Cumulative inference compute output duration",
                "compute_output",
            ),
        ):
            yield counter(name, f"{doc} in microseconds", _microseconds(attr))
        yield from _cache_counters([s for s in snaps if s.response_cache])
        pending = GaugeMetricFamily(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            labels=_LABELS,
        )
        for s in snaps:
            pending.add_metric([s.name, s.version], s.pending)
        yield pending

        latency = HistogramMetricFamily(
            "inferd_request_latency_us",
            "End-to-end request latency inside the server, in microseconds",
            labels=_LABELS,
        )
        batch = HistogramMetricFamily(
            "inferd_batch_size",
            "Rows per model execution (batch size)",
            labels=_LABELS,
        )
        for s in snaps:
            labels = [s.name, s.version]
            latency.add_metric(labels, cumulative_buckets(s.latency_us), s.latency_us.total)
            batch.add_metric(labels, cumulative_buckets(s.batch_rows), s.batch_rows.total)
        yield latency
        yield batch
        rejected = CounterMetricFamily(
            "inferd_rejected_requests",
            "Requests refused before execution, by reason (queue full, queue timeout...)",
            labels=[*_LABELS, "reason"],
        )
        closed = CounterMetricFamily(
            "inferd_batches_closed",
            "Batches sent by the dynamic batcher, by why they were sent when they were "
            "(full, preferred, shape_mismatch, no_room, delay_expired, no_delay)",
            labels=[*_LABELS, "reason"],
        )
        for s in snaps:
            for reason, count in sorted(s.rejections.items()):
                rejected.add_metric([s.name, s.version, reason], count)
            for reason, count in sorted(s.batch_close_reasons.items()):
                closed.add_metric([s.name, s.version, reason], count)
        yield rejected
        yield closed
