"""The payload log: an observer of answered requests that samples them and writes them to
files, never making a request wait or fail.

On the event loop, per answered request: the model's rate (one dictionary lookup once known),
a random draw when the rate is below 1, and for a sampled request a check of the bounds (no
lock) and one tuple of references (its inputs, with redacted ones left out, its outputs and
parameters, a timestamp) appended to a deque. A request past the bounds is dropped and
counted.

The records are encoded on the event loop too, a chunk at a time (:data:`CHUNK_RECORDS`
records or :data:`CHUNK_BYTES` of tensors) in a callback of its own (never inside a request):
once a chunk has gathered, or when the writer thread asks for what is waiting (every
``flush_secs``). Encoding there costs the loop what it
would cost any thread, while encoding on a second Python thread also costs the loop the
interpreter lock handed back and forth (measured: docs/observability.md). For Parquet, chunks
of alike records then wait as columns until a row group's worth has gathered, and get one
Arrow table (:mod:`~inferd.monitoring.payload_log.row_groups`). The writer thread only writes
(:mod:`~inferd.monitoring.payload_log.writer`). Without a running event loop (an
observer called from plain threads) the writer thread encodes.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from operator import itemgetter

from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.core.observe import ModelOutputs
from inferd.core.payload_stats import PayloadLogStats
from inferd.errors import InferdError
from inferd.monitoring.payload_log.buffer import HandOff
from inferd.monitoring.payload_log.counters import Counters
from inferd.monitoring.payload_log.encode import Chunk, Failure, encode
from inferd.monitoring.payload_log.parquet import ROW_GROUP_ROWS
from inferd.monitoring.payload_log.records import Captured, capture_inputs
from inferd.monitoring.payload_log.row_groups import RowGroups
from inferd.monitoring.payload_log.settings import PayloadLogSettings
from inferd.monitoring.payload_log.writer import OpenSink, PayloadWriter, open_sink

__all__ = ["CHUNK_BYTES", "CHUNK_RECORDS", "PayloadLogger"]

_log = logging.getLogger("inferd.payload_log")

#: records encoded in one go, at most: about a millisecond of the event loop's time (chunks of
#: 512 were measured to encode an eighth to a fifth cheaper per record, with no gain in
#: throughput and 1-2 ms more at p99: docs/observability.md)
CHUNK_RECORDS = 128
#: or fewer, once their tensors hold this many bytes (a chunk of large tensors takes as long)
CHUNK_BYTES = 4 << 20


#: builds a :class:`Captured` from a tuple of its fields (a named tuple's own constructor adds
#: a Python call per sampled request)
_new_record = tuple.__new__


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class PayloadLogger:
    """Implements :class:`~inferd.core.observe.InferenceObserver`; ``start()`` and ``stop()``
    with the server (stop writes what is queued and closes every file). ``draw`` (the sampling
    draw), ``wall_ns`` (the records' clock) and ``open_file`` (how a log file is opened) are
    injected for tests."""

    def __init__(
        self,
        settings: PayloadLogSettings,
        *,
        draw: Callable[[], float] | None = None,
        wall_ns: Callable[[], int] = time.time_ns,
        open_file: OpenSink = open_sink,
    ) -> None:
        self.settings = settings
        self._rates: dict[str, float] = {}
        self._redact = settings.redact
        self._draw = draw if draw is not None else random.Random().random
        self._wall_ns = wall_ns
        self._counters = Counters()
        self._handoff: HandOff[Chunk] = HandOff(settings.queue_requests, settings.queue_bytes)
        self._pending: deque[tuple[Captured, int]] = deque()  # admitted, not yet encoded
        self._pending_bytes = 0  # the tensor bytes they hold
        # Parquet: chunks of alike records gathered into row groups before their table is
        # built (encoded, not yet handed to the writer)
        self._row_groups = RowGroups(ROW_GROUP_ROWS) if settings.format == "parquet" else None
        self._loop: asyncio.AbstractEventLoop | None = None  # found by the first observation
        self._scheduled = False  # an encoding callback is scheduled on the loop
        self._encoding = threading.Lock()  # one encoder at a time, so chunks keep their order
        self._encode_failing: set[str] = set()
        self._encode_cpu_ns = 0  # the loop's CPU time spent in _encode_chunk
        self._writer = PayloadWriter(
            settings,
            self._handoff,
            self._counters,
            self._collect,
            wall_ns=wall_ns,
            open_file=open_file,
        )
        self._started = False

    def start(self) -> None:
        """Check the directory can be written and start the writer thread."""
        settings = self.settings
        if settings.format == "parquet":
            from inferd.monitoring.payload_log.parquet import require_pyarrow

            require_pyarrow()
        directory = settings.directory
        try:
            directory.mkdir(parents=True, exist_ok=True)
            probe = directory / f".inferd-write-check-{id(self)}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise InferdError(
                f"--payload-log {directory}: the folder cannot be written "
                f"({exc.strerror or exc}); give a folder this server's user may write"
            ) from None
        self._writer.start()
        self._started = True

    def stop(self) -> None:
        """Admit no more records, encode and write what is waiting, close every file."""
        if not self._started:
            return
        self._handoff.seal()
        self._drain()
        self._writer.stop()

    def observe(
        self, spec: ModelSpec, version: int, request: InferRequest, outputs: ModelOutputs
    ) -> None:
        name = spec.name
        rate = self._rates.get(name)
        if rate is None:
            rate = self._rates[name] = self.settings.rate_for(name)
        if rate < 1.0 and (rate <= 0.0 or self._draw() >= rate):
            return
        inputs, redacted, nbytes = capture_inputs(request.inputs, self._redact)
        for array in outputs.values():
            nbytes += array.nbytes
        if not self._handoff.admit(nbytes):
            self._counters.dropped(name, "queue_full")
            return
        captured = _new_record(
            Captured,
            (
                name,
                version,
                request.id,
                self._wall_ns(),
                inputs,
                redacted,
                outputs,
                request.parameters,
            ),
        )
        pending = self._pending
        pending.append((captured, nbytes))
        self._pending_bytes += nbytes
        loop = self._loop
        if loop is None:
            loop = self._loop = _running_loop()
        if not self._scheduled and self._chunk_ready():
            if loop is not None:
                self._scheduled = True
                loop.call_soon(self._encode_chunk)
            else:
                self._handoff.wake()  # no loop here: the writer thread encodes

    # -- encoding --------------------------------------------------------------------------

    def _chunk_ready(self) -> bool:
        return len(self._pending) >= CHUNK_RECORDS or self._pending_bytes >= CHUNK_BYTES

    def _collect(self) -> None:
        """The writer asks for what waits (on its thread): the loop encodes it, or, when there
        is no loop, the writer does."""
        if not self._pending and not self._row_groups:
            return
        loop = self._loop
        if loop is not None:
            if self._scheduled:
                return
            self._scheduled = True
            try:
                loop.call_soon_threadsafe(self._encode_chunk)
                return
            except RuntimeError:  # the loop is closed
                self._scheduled = False
        self._encode_all()

    def _encode_chunk(self) -> None:
        """On the loop: encode one chunk, and schedule another if more are waiting."""
        self._scheduled = False
        if not self._encoding.acquire(blocking=False):
            return  # another thread is encoding (stopping): it takes these too
        started = time.thread_time_ns()
        try:
            if self._pending:
                self._encode()
            if self._row_groups:
                self._hand_over(*self._row_groups.due(self._wall_ns()))
        finally:
            self._encoding.release()
            self._encode_cpu_ns += time.thread_time_ns() - started
        if self._chunk_ready() and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._encode_chunk)

    def _encode_all(self) -> None:
        with self._encoding:
            while self._pending:
                self._encode()
            if self._row_groups:
                self._hand_over(*self._row_groups.drain())

    def _encode(self) -> None:
        """Encode one chunk: the oldest records, up to :data:`CHUNK_RECORDS` of them or
        :data:`CHUNK_BYTES` of tensors (at least one)."""
        pending = self._pending
        pop = pending.popleft
        if self._pending_bytes <= CHUNK_BYTES:
            items = [pop() for _ in range(min(CHUNK_RECORDS, len(pending)))]
            self._pending_bytes -= sum(map(itemgetter(1), items))
        else:
            items = []
            taken = 0
            while pending and len(items) < CHUNK_RECORDS and taken < CHUNK_BYTES:
                items.append(pop())
                taken += items[-1][1]
            self._pending_bytes -= taken
        if not pending:
            self._pending_bytes = 0  # observers on plain threads may have raced the count
        try:
            chunks, failures = encode(self.settings.format, items, build=False)
        except Exception:  # a bug: the records are lost, the server goes on
            _log.exception("the payload log could not encode %d request(s)", len(items))
            for captured, nbytes in items:
                self._counters.dropped(captured.model, "write_error")
                self._handoff.release(1, nbytes)
            return
        if self._row_groups is not None:
            now = self._wall_ns()
            for chunk in chunks:
                self._hand_over(*self._row_groups.add(chunk, now))
            self._hand_over([], failures)
        else:
            self._hand_over(chunks, failures)

    def _hand_over(self, chunks: list[Chunk], failures: list[Failure]) -> None:
        """Offer encoded chunks to the writer; count and log (once per model) what failed."""
        for failure in failures:
            self._counters.dropped(failure.model, "write_error", failure.records)
            self._handoff.release(failure.records, failure.held_bytes)
            if failure.model not in self._encode_failing:
                self._encode_failing.add(failure.model)
                _log.error(
                    "payload log of model '%s': %d request(s) could not be encoded: %s",
                    failure.model,
                    failure.records,
                    failure.error,
                )
        for chunk in chunks:
            self._handoff.offer(chunk)

    def _drain(self) -> None:
        """Encode everything still waiting: on the loop when it runs on another thread (after
        any encoding already scheduled there), here otherwise."""
        loop = self._loop
        if loop is not None and loop.is_running() and _running_loop() is not loop:
            done = threading.Event()

            def run() -> None:
                try:
                    self._encode_all()
                finally:
                    done.set()

            try:
                loop.call_soon_threadsafe(run)
            except RuntimeError:  # closed meanwhile
                pass
            else:
                done.wait(30.0)
        self._encode_all()

    def statistics(self) -> PayloadLogStats:
        queued, queued_bytes = self._handoff.depth()
        return PayloadLogStats(
            self._counters.snapshot(),
            queued,
            queued_bytes,
            self._writer.cpu_ns / 1e9,
            self._encode_cpu_ns / 1e9,
            self._writer.retention.statistics(),
        )
