"""Responses that a model streams: zero, one or many per request (decoupled models).

A decoupled model sends its responses through the request's :class:`ResponseSink`, from
whatever thread runs it; the sink hands each one to its consumer (the engine's stream, on the
event loop) through the ``deliver`` function it was built with, with the response's
:class:`ResponseTiming` (its index within the request and where its time went, for the
statistics extension's ``response_stats``). A consumer that goes away (a client that cancels
or disconnects) calls :meth:`ResponseSink.cancel`: the sink then drops every later response
and tells the watchers (the instance running the request) so the model learns of it
(``request.is_cancelled()``).

A :class:`ResponseBudget` bounds the responses that the requests of one stream have sent and
their consumer has not taken yet: a model thread that sends beyond it waits for room.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.errors import InferdError

__all__ = [
    "RESPONSE_KINDS",
    "ResponseBudget",
    "ResponseSink",
    "ResponseTiming",
    "StreamedResponse",
]

Outputs = dict[str, np.ndarray[Any, Any]]

#: How a response ended, as the statistics extension counts it: with outputs, with an error,
#: as the final flag alone, or cancelled (the model ended the request after its consumer left).
RESPONSE_KINDS = ("success", "fail", "empty", "cancel")


@dataclass(frozen=True, slots=True)
class StreamedResponse:
    """One response of a stream: outputs, or an error; ``final`` marks the last one.

    ``outputs`` is None for a final marker that carries no response (a model that completes a
    request with the final flag alone). ``output_ns`` is the time the backend spent extracting
    the outputs (0 when it does not say)."""

    outputs: Outputs | None
    error: InferdError | None = None
    final: bool = False
    output_ns: int = 0


@dataclass(frozen=True, slots=True)
class ResponseTiming:
    """One response of a request for the statistics: its ``index`` within the request (every
    response counts, the final flag alone too), its kind (one of :data:`RESPONSE_KINDS`), the
    time since the previous response (or since the request began executing) less the output
    time (``infer_ns``), and the output time (``output_ns``). For ``cancel``, ``infer_ns`` is
    the time from the cancellation to the model ending the request."""

    index: int
    kind: str
    infer_ns: int
    output_ns: int = 0


Deliver = Callable[[StreamedResponse | None, ResponseTiming], None]


class ResponseSink:
    """Where a model sends the responses of one request (thread-safe).

    ``deliver(item, timing)`` receives every response that is sent, and ``(None, timing)``
    once when a cancelled request ends (its final flag, dropped)."""

    __slots__ = (
        "_cancelled",
        "_cancelled_ns",
        "_clock",
        "_deliver",
        "_done",
        "_index",
        "_last_ns",
        "_lock",
        "_watchers",
        "adopted",
        "sent",
    )

    def __init__(self, deliver: Deliver, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self._deliver = deliver
        self._clock = clock
        self._lock = threading.Lock()
        self._cancelled = False
        self._done = False
        self._watchers: list[Callable[[], None]] = []
        self._index = 0
        self._last_ns = clock()
        self._cancelled_ns = 0
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
        now = self._clock()
        with self._lock:
            if self._done:
                return False
            if item.final:
                self._done = True
            if self._cancelled:
                if not item.final:
                    return False
                timing = ResponseTiming(self._index, "cancel", max(0, now - self._cancelled_ns))
                delivered: StreamedResponse | None = None
            else:
                if item.error is not None:
                    kind = "fail"
                elif item.outputs is not None:
                    kind = "success"
                else:
                    kind = "empty"
                if kind != "empty":
                    self.sent += 1
                infer_ns = max(0, now - item.output_ns - self._last_ns)
                timing = ResponseTiming(self._index, kind, infer_ns, item.output_ns)
                self._index += 1
                self._last_ns = now
                delivered = item
        self._deliver(delivered, timing)
        return delivered is not None

    def adopt(self) -> None:
        """The backend promises to end the request through this sink (with a final response
        or marker), possibly after its ``execute`` has returned; the request's execution
        begins now (the first response's time counts from here)."""
        self._last_ns = self._clock()
        self.adopted = True

    def cancel(self) -> None:
        """The consumer is gone: drop later responses and tell the watchers (once)."""
        with self._lock:
            if self._cancelled or self._done:
                return
            self._cancelled = True
            self._cancelled_ns = self._clock()
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


class ResponseBudget:
    """Room for ``limit`` responses that a stream's models have sent and its consumer has not
    taken yet (thread-safe).

    :meth:`acquire` takes a place; on any thread but the one that built the budget (the event
    loop's, which must never wait) it waits while none is free, until :meth:`release` frees
    one, or ``gone()`` turns true (call :meth:`wake` after making it so), or the budget is
    closed. Taking over the limit on the loop's own thread is allowed: it cannot wait; so is
    taking it without waiting when the caller asks (a request's final response: one per
    request, and a thread that ends requests may hold locks it must not wait under).
    """

    __slots__ = ("_closed", "_cond", "_held", "_limit", "_owner")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("a response budget needs room for at least one response")
        self._limit = limit
        self._held = 0
        self._closed = False
        self._cond = threading.Condition(threading.Lock())
        self._owner = threading.get_ident()

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def held(self) -> int:
        return self._held

    def acquire(self, gone: Callable[[], bool], *, wait: bool = True) -> bool:
        """Take one place (waiting for room off the owner's thread, unless ``wait`` is false);
        False, taking nothing, when the consumer is ``gone()`` or the budget is closed."""
        with self._cond:
            if wait and threading.get_ident() != self._owner:
                while self._held >= self._limit and not self._closed and not gone():
                    self._cond.wait()
            if self._closed or gone():
                return False
            self._held += 1
            return True

    def release(self, count: int = 1) -> None:
        if count <= 0:
            return
        with self._cond:
            self._held = max(0, self._held - count)
            self._cond.notify_all()

    def wake(self) -> None:
        """Make every waiting thread look again at its ``gone()``."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """The stream is over: nothing waits any more, nothing is taken."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
