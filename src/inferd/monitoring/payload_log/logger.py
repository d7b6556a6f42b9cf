"""The payload log: an observer of answered requests that samples them and hands them to its
writer thread, never making a request wait or fail.

On the event loop, per answered request: the model's rate (one dictionary lookup once known),
a random draw when the rate is below 1, and for a sampled request one tuple of references (its
inputs, with redacted ones left out, its outputs and parameters, a timestamp) appended to a
bounded hand-off, with no lock and no thread wake-up (:mod:`~inferd.monitoring.payload_log.
buffer`). A full hand-off drops the request and counts it. Encoding and file I/O happen on the
writer thread (:mod:`~inferd.monitoring.payload_log.writer`), a batch at a time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.core.payload_stats import PayloadLogStats
from inferd.errors import InferdError
from inferd.monitoring.payload_log.buffer import HandOff
from inferd.monitoring.payload_log.counters import Counters
from inferd.monitoring.payload_log.records import Captured, capture_inputs
from inferd.monitoring.payload_log.settings import PayloadLogSettings
from inferd.monitoring.payload_log.writer import OpenSink, PayloadWriter, open_sink

__all__ = ["PayloadLogger"]


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
        self._handoff: HandOff[Captured] = HandOff(settings.queue_requests, settings.queue_bytes)
        self._writer = PayloadWriter(
            settings, self._handoff, self._counters, wall_ns=wall_ns, open_file=open_file
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
        if self._started:
            self._writer.stop()

    def observe(
        self,
        spec: ModelSpec,
        version: int,
        request: InferRequest,
        outputs: Mapping[str, np.ndarray[Any, Any]],
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
        captured = Captured(
            name,
            version,
            request.id,
            self._wall_ns(),
            inputs,
            redacted,
            outputs,
            request.parameters,
        )
        if not self._handoff.offer(captured, nbytes):
            self._counters.dropped(name, "queue_full")

    def statistics(self) -> PayloadLogStats:
        queued, queued_bytes = self._handoff.depth()
        return PayloadLogStats(
            self._counters.snapshot(), queued, queued_bytes, self._writer.cpu_ns / 1e9
        )
