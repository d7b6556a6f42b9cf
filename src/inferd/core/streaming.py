"""Responses that a model streams: zero, one or many per request (decoupled models).

A decoupled model sends its responses through the request's :class:`ResponseSink`, from
whatever thread runs it; the sink hands each one to its consumer (the engine's stream, on the
event loop) through the ``deliver`` function it was built with. A consumer that goes away
(a client that cancels or disconnects) calls :meth:`ResponseSink.cancel`: the sink then drops
every later response and tells the watchers (the instance running the request) so the model
learns of it (``request.is_cancelled()``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.errors import InferdError

__all__ = ["ResponseSink", "StreamedResponse"]

Outputs = dict[str, np.ndarray[Any, Any]]


@dataclass(frozen=True, slots=True)
class StreamedResponse:
    """One response of a stream: outputs, or an error; ``final`` marks the last one.

    ``outputs`` is None for a final marker that carries no response (a model that completes a
    request with the final flag alone)."""

    outputs: Outputs | None
    error: InferdError | None = None
    final: bool = False


class ResponseSink:
    """Where a model sends the responses of one request (thread-safe)."""

    __slots__ = ("_cancelled", "_deliver", "_done", "_lock", "_watchers", "adopted", "sent")

    def __init__(self, deliver: Callable[[StreamedResponse], None]) -> None:
        self._deliver = deliver
        self._lock = threading.Lock()
        self._cancelled = False
        self._done = False
        self._watchers: list[Callable[[], None]] = []
        self.sent = 0  # responses delivered (final markers not counted)
        self.adopted = False  # the backend ends the request through this sink (see adopt())

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def done(self) -> bool:
        """The final response (or marker) was sent, or the request was cancelled."""
        return self._done or self._cancelled

    def send(self, item: StreamedResponse) -> bool:
        """Deliver one response; False (and dropped) once cancelled or after the final one."""
        with self._lock:
            if self._cancelled or self._done:
                return False
            if item.final:
                self._done = True
            if item.outputs is not None or item.error is not None:
                self.sent += 1
        self._deliver(item)
        return True

    def adopt(self) -> None:
        """The backend promises to end the request through this sink (with a final response
        or marker), possibly after its ``execute`` has returned."""
        self.adopted = True

    def cancel(self) -> None:
        """The consumer is gone: drop later responses and tell the watchers (once)."""
        with self._lock:
            if self._cancelled or self._done:
                return
            self._cancelled = True
            watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            watcher()

    def watch(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the cancelling thread) when the request is cancelled; at
        once if it already is."""
        with self._lock:
            if not self._cancelled:
                self._watchers.append(callback)
                return
        callback()
