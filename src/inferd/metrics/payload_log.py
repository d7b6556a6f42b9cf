"""The payload log's counters as Prometheus metrics (``inferd_payload_log_*``), read from its
statistics snapshot at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inferd.core.payload_stats import DROP_REASONS, RETENTION_REASONS, PayloadLogStats

__all__ = ["PayloadLogCollector"]


class PayloadLogCollector(Collector):
    def __init__(self, read: Callable[[], PayloadLogStats]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        stats = self._read()
        logged = CounterMetricFamily(
            "inferd_payload_log_requests",
            "Requests written to the payload log",
            labels=["model"],
        )
        dropped = CounterMetricFamily(
            "inferd_payload_log_dropped",
            "Sampled requests not written: queue_full (the writer fell behind) or write_error",
            labels=["model", "reason"],
        )
        written = CounterMetricFamily(
            "inferd_payload_log_bytes",
            "Bytes written to payload log files",
            labels=["model"],
        )
        files = CounterMetricFamily(
            "inferd_payload_log_files",
            "Payload log files opened",
            labels=["model"],
        )
        for model in stats.models:
            logged.add_metric([model.model], model.logged)
            for reason in DROP_REASONS:
                dropped.add_metric([model.model, reason], model.dropped(reason))
            written.add_metric([model.model], model.bytes)
            files.add_metric([model.model], model.files)
        yield logged
        yield dropped
        yield written
        yield files
        yield GaugeMetricFamily(
            "inferd_payload_log_queued_requests",
            "Sampled requests waiting for the payload log writer",
            value=stats.queued,
        )
        yield GaugeMetricFamily(
            "inferd_payload_log_queued_bytes",
            "About the tensor bytes held by requests waiting for the payload log writer",
            value=stats.queued_bytes,
        )
        retention = stats.retention
        deleted_files = CounterMetricFamily(
            "inferd_payload_log_deleted_files",
            "Payload log files deleted: max_bytes (every file together passed the cap) or "
            "max_age (a file passed the age limit)",
            labels=["reason"],
        )
        deleted_bytes = CounterMetricFamily(
            "inferd_payload_log_deleted_bytes",
            "Bytes the deleted payload log files held",
            labels=["reason"],
        )
        for reason in RETENTION_REASONS:
            deleted_files.add_metric([reason], retention.deleted_files(reason))
            deleted_bytes.add_metric([reason], retention.deleted_bytes(reason))
        yield deleted_files
        yield deleted_bytes
        yield GaugeMetricFamily(
            "inferd_payload_log_disk_bytes",
            "Bytes the payload log's files hold now, over every model (the ones being written too)",
            value=retention.disk_bytes,
        )
        yield GaugeMetricFamily(
            "inferd_payload_log_disk_files",
            "Payload log files on disk now, over every model",
            value=retention.disk_files,
        )
        yield CounterMetricFamily(
            "inferd_payload_log_writer_cpu_seconds",
            "CPU time the payload log's writer thread spent writing records",
            value=stats.writer_cpu_seconds,
        )
        yield CounterMetricFamily(
            "inferd_payload_log_encode_cpu_seconds",
            "CPU time the event loop spent encoding sampled requests for the payload log",
            value=stats.encode_cpu_seconds,
        )
