"""The payload log's counters, per model: bumped by the observer (drops at the hand-off, on the
event loop) and by the writer thread (records, bytes, files, write errors), read at scrape
time. One lock guards them; each update is a few dictionary operations."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from inferd.core.payload_stats import DROP_REASONS, PayloadLogModelStats

__all__ = ["Counters"]


@dataclass(slots=True)
class _Model:
    logged: int = 0
    dropped_queue_full: int = 0
    dropped_write_error: int = 0
    bytes: int = 0
    files: int = 0


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[str, _Model] = {}

    def _model(self, model: str) -> _Model:
        found = self._models.get(model)
        if found is None:
            found = self._models[model] = _Model()
        return found

    def wrote(self, model: str, records: int, nbytes: int) -> None:
        with self._lock:
            counts = self._model(model)
            counts.logged += records
            counts.bytes += nbytes

    def opened(self, model: str) -> None:
        with self._lock:
            self._model(model).files += 1

    def dropped(self, model: str, reason: str, count: int = 1) -> None:
        if reason not in DROP_REASONS:
            raise ValueError(f"unknown drop reason {reason!r}")
        with self._lock:
            counts = self._model(model)
            setattr(counts, f"dropped_{reason}", getattr(counts, f"dropped_{reason}") + count)

    def snapshot(self) -> tuple[PayloadLogModelStats, ...]:
        with self._lock:
            return tuple(
                PayloadLogModelStats(
                    model=name,
                    logged=c.logged,
                    dropped_queue_full=c.dropped_queue_full,
                    dropped_write_error=c.dropped_write_error,
                    bytes=c.bytes,
                    files=c.files,
                )
                for name, c in sorted(self._models.items())
            )
