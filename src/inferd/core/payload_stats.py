"""What the payload log has done: the snapshot its ``statistics()`` returns and the metrics
collector reads at scrape time."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DROP_REASONS",
    "RETENTION_REASONS",
    "PayloadLogModelStats",
    "PayloadLogRetentionStats",
    "PayloadLogStats",
]

#: why a sampled request was not written: the hand-off queue was full, or writing it failed
DROP_REASONS = ("queue_full", "write_error")
#: why a file of the log was deleted: the files passed the byte cap, or it passed the age limit
RETENTION_REASONS = ("max_bytes", "max_age")


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
class PayloadLogRetentionStats:
    disk_bytes: int = 0  # bytes the log's files hold now, over every model (open ones too)
    disk_files: int = 0  # how many files that is
    deleted_files_max_bytes: int = 0  # files deleted to keep under the byte cap
    deleted_files_max_age: int = 0  # files deleted for their age
    deleted_bytes_max_bytes: int = 0  # the bytes those files held
    deleted_bytes_max_age: int = 0

    def deleted_files(self, reason: str) -> int:
        return int(getattr(self, f"deleted_files_{reason}"))

    def deleted_bytes(self, reason: str) -> int:
        return int(getattr(self, f"deleted_bytes_{reason}"))


@dataclass(frozen=True, slots=True)
class PayloadLogStats:
    models: tuple[PayloadLogModelStats, ...] = ()
    queued: int = 0  # sampled requests waiting for the writer
    queued_bytes: int = 0  # about the tensor bytes they hold
    writer_cpu_seconds: float = 0.0  # CPU time the writer thread spent writing (and encoding
    # when the observer runs without an event loop)
    encode_cpu_seconds: float = 0.0  # CPU time the event loop spent encoding chunks of records
    retention: PayloadLogRetentionStats = PayloadLogRetentionStats()
