"""What the payload log has done: the snapshot its ``statistics()`` returns and the metrics
collector reads at scrape time."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DROP_REASONS", "PayloadLogModelStats", "PayloadLogStats"]

#: why a sampled request was not written: the hand-off queue was full, or writing it failed
DROP_REASONS = ("queue_full", "write_error")


@dataclass(frozen=True, slots=True)
class PayloadLogModelStats:
    model: str
    logged: int = 0  # requests written
    dropped_queue_full: int = 0
    dropped_write_error: int = 0
    bytes: int = 0  # bytes written to its files
    files: int = 0  # files opened

    def dropped(self, reason: str) -> int:
        return int(getattr(self, f"dropped_{reason}"))


@dataclass(frozen=True, slots=True)
class PayloadLogStats:
    models: tuple[PayloadLogModelStats, ...] = ()
    queued: int = 0  # sampled requests waiting for the writer
    queued_bytes: int = 0  # about the tensor bytes they hold
    writer_cpu_seconds: float = 0.0  # CPU time the writer thread spent writing (and encoding
    # when the observer runs without an event loop)
    encode_cpu_seconds: float = 0.0  # CPU time the event loop spent encoding chunks of records
