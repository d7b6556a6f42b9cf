"""The payload log's writer thread: writes the encoded chunks handed to it to each model's
current file, rotates files by size and age, and counts what it wrote and lost.

Only this thread touches the files. It does little Python work: the records were encoded
before they reached it (:mod:`~inferd.monitoring.payload_log.logger`), and the file writes
themselves (JSONL lines joined, Parquet row groups) run without the interpreter lock. Each
time it wakes (every ``flush_secs``, or when a chunk comes) it first asks for the records
still waiting to be encoded (``collect``).

A write that fails (disk full, folder removed) drops the records it held, counts them as
``write_error`` and closes the file, cut back to what was written whole (a file left with no
record is removed, so a full disk leaves no empty files behind); the next records open a new
one. Errors are logged once per model until a write succeeds again.

Each file it closes goes to the log's retention
(:mod:`~inferd.monitoring.payload_log.retention`), which deletes the oldest files once every
file together passes ``max_bytes`` and any file past ``max_age_secs``: checked whenever a
file closes and every time the thread wakes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from inferd.monitoring.payload_log.buffer import HandOff
from inferd.monitoring.payload_log.counters import Counters
from inferd.monitoring.payload_log.encode import Chunk
from inferd.monitoring.payload_log.files import confined, file_name, model_folder, should_rotate
from inferd.monitoring.payload_log.jsonl import JsonlSink
from inferd.monitoring.payload_log.retention import Retention
from inferd.monitoring.payload_log.settings import PayloadLogSettings

__all__ = ["OpenSink", "PayloadWriter", "Sink", "open_sink"]

_log = logging.getLogger("inferd.payload_log")


class Sink(Protocol):
    size: int
    path: Path

    @property
    def pending(self) -> int: ...
    def accepts(self, chunk: Chunk) -> bool: ...
    def write(self, chunk: Chunk, start: int, room: int) -> tuple[int, int, int]: ...
    def close(self) -> tuple[int, int]: ...
    def abort(self) -> None: ...


@dataclass(slots=True)
class _Open:
    sink: Sink
    opened_ns: int
    written_ns: int  # when it last took records


#: ``open_sink(format, path, first chunk)``: a new file of that format at ``path``
OpenSink = Callable[[str, Path, Chunk], Sink]


def open_sink(fmt: str, path: Path, first: Chunk) -> Sink:
    """The format's file at ``path`` (created exclusively), ready for ``first``."""
    if fmt == "parquet":
        from inferd.monitoring.payload_log.parquet import ParquetSink

        return ParquetSink(path, first.key)
    return JsonlSink(path)


class PayloadWriter:
    """Owns the thread and every open file. ``start()``, then ``stop()`` (drains and closes)."""

    def __init__(
        self,
        settings: PayloadLogSettings,
        handoff: HandOff[Chunk],
        counters: Counters,
        collect: Callable[[], None],
        *,
        wall_ns: Callable[[], int] = time.time_ns,
        open_file: OpenSink = open_sink,
    ) -> None:
        self._settings = settings
        self._handoff = handoff
        self._counters = counters
        self._collect = collect
        self._wall_ns = wall_ns
        self._open_file = open_file
        self._open: dict[str, _Open] = {}
        self._sequence = 0
        self._failing: set[str] = set()  # models whose last write failed (logged once)
        self.retention = Retention(settings.directory, settings.max_bytes, settings.max_age_secs)
        self.cpu_ns = 0  # the thread's CPU time so far, as of its last batch
        self._thread = threading.Thread(target=self._run, name="inferd-payload-log", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Write what was handed over (the caller closed the hand-off), close every file."""
        self._handoff.close()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                _log.warning("the payload log writer did not finish within %.0f s", timeout_s)

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self.retention.scan()
            self._retain()
            while True:
                closed = self._handoff.closed  # read first: nothing is offered once it is seen
                chunks = self._handoff.take(self._settings.flush_secs)
                for chunk in chunks:
                    self._write_chunk(chunk)
                self._close_aged()
                self._retain()
                self.cpu_ns = time.thread_time_ns()
                if closed and not chunks:
                    break
                if not closed:
                    self._collect()
        except Exception:  # a bug here must not go unseen; the server keeps serving
            _log.exception("the payload log writer stopped")
        finally:
            try:
                for model in list(self._open):
                    self._close(model)
            except Exception:
                _log.exception("the payload log writer could not close its files")
            self.cpu_ns = time.thread_time_ns()

    def _write_chunk(self, chunk: Chunk) -> None:
        model = chunk.model
        start = 0
        try:
            while start < chunk.records:
                current: _Open | None = None
                try:
                    current = self._current(model, chunk)
                    room = self._settings.rotate_bytes - current.sink.size
                    taken, written, grown = current.sink.write(chunk, start, room)
                except Exception as exc:  # the disk's or the format's: the writer goes on
                    lost = chunk.records - start + (current.sink.pending if current else 0)
                    self._failed(model, lost, exc)
                    return
                self._counters.wrote(model, written, grown)
                if written:  # records reached the file (Parquet rows may only wait in memory)
                    self._failing.discard(model)
                start += taken
        finally:
            self._handoff.release(chunk.records, chunk.held_bytes)

    def _current(self, model: str, chunk: Chunk) -> _Open:
        """The open file that takes ``chunk``, rotated if full, old or of other tensors."""
        now = self._wall_ns()
        current = self._open.get(model)
        if current is not None and (
            not current.sink.accepts(chunk)
            or should_rotate(
                current.sink.size,
                current.opened_ns,
                now,
                self._settings.rotate_bytes,
                self._settings.rotate_secs,
            )
        ):
            self._close(model)
            current = None
        if current is None:
            folder = model_folder(model)
            directory = confined(self._settings.directory, folder)
            directory.mkdir(exist_ok=True)
            sink = self._new_sink(directory, folder, now, chunk)
            current = self._open[model] = _Open(sink, now, now)
            self._counters.opened(model)
        current.written_ns = now
        return current

    def _new_sink(self, directory: Path, folder: str, now: int, chunk: Chunk) -> Sink:
        fmt = self._settings.format
        for _ in range(100):
            self._sequence += 1
            path = directory / file_name(folder, now, self._sequence, fmt)
            try:
                return self._open_file(fmt, path, chunk)
            except FileExistsError:
                continue
        raise OSError(f"no free file name in {directory}")

    def _close_aged(self) -> None:
        """Close files past their age even when no record comes to rotate them (a Parquet file
        is readable only once closed)."""
        secs = self._settings.rotate_secs
        if secs <= 0:
            return
        now = self._wall_ns()
        for model, current in list(self._open.items()):
            if now - current.opened_ns >= secs * 1e9:
                self._close(model)

    def _retain(self) -> None:
        """Apply the retention: an open file that took no record for ``max_age_secs`` is
        closed (so that it can go), then the closed files past the age or the cap go."""
        now = self._wall_ns()
        max_age = self._settings.max_age_secs
        if max_age > 0:
            for model, current in list(self._open.items()):
                if now - current.written_ns >= max_age * 1e9:
                    self._close(model)
        self.retention.enforce(now, [o.sink.size for o in self._open.values()])

    def _close(self, model: str) -> None:
        current = self._open.pop(model, None)
        if current is None:
            return
        pending = current.sink.pending
        try:
            written, grown = current.sink.close()
        except Exception as exc:
            self._failed(model, pending, exc)
            with contextlib.suppress(Exception):
                current.sink.abort()
        else:
            self._counters.wrote(model, written, grown)
            self._failing.discard(model)
        self._retire(current)

    def _retire(self, current: _Open) -> None:
        """Hand a closed file to the retention, and apply it."""
        self.retention.closed(current.sink.path, current.written_ns)
        self.retention.enforce(self._wall_ns(), [o.sink.size for o in self._open.values()])

    def _failed(self, model: str, count: int, exc: BaseException) -> None:
        if count:
            self._counters.dropped(model, "write_error", count)
        if model not in self._failing:
            self._failing.add(model)
            _log.error(
                "payload log of model '%s': writing failed, %d request(s) dropped: %s",
                model,
                count,
                exc,
            )
        current = self._open.pop(model, None)
        if current is not None:
            try:
                current.sink.abort()
            except Exception as close_exc:  # the file is already broken
                _log.debug("closing a failed payload log file: %s", close_exc)
            self._retire(current)
