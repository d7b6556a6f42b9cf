"""Handing a streamed request's text to its response sink without ever holding up the engine.

A sink's ``send`` may wait: the front end bounds the responses a client has not read yet (a
:class:`~inferd.core.streaming.ResponseBudget`), and a client that stops reading fills it. Were
the generation thread to send itself, one such client would stall every sequence of the model.
So the engine only *posts* text here; each request's text is sent by a small pool of sender
threads, in order, one send at a time per request. While a send waits, later text of the same
request is joined into one pending piece (its memory is bounded by the sequence's length), and
goes out as one response when the client reads again; other requests are sent by other
threads. The final flag (or an error) goes after the text before it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from inferd.errors import InferdError

__all__ = ["Outbox", "StreamSender"]

log = logging.getLogger(__name__)

#: ``send(text, error, final)``: one response to the request's sink (may wait)
Send = Callable[[str | None, InferdError | None, bool], None]


class Outbox:
    """One request's text not sent yet (thread-safe); built by :meth:`StreamSender.outbox`."""

    __slots__ = ("_error", "_final", "_lock", "_scheduled", "_send", "_sender", "_text")

    def __init__(self, sender: StreamSender, send: Send) -> None:
        self._sender = sender
        self._send = send
        self._lock = threading.Lock()
        self._text: list[str] = []
        self._error: InferdError | None = None
        self._final = False
        self._scheduled = False

    def post(self, text: str | None, error: InferdError | None, final: bool) -> None:
        """Queue a delta (and/or the end); returns at once."""
        with self._lock:
            if self._final:
                return
            if text:
                self._text.append(text)
            if error is not None:
                self._error = error
            self._final = final
            if self._scheduled:
                return
            self._scheduled = True
        self._sender.schedule(self._drain)

    def _drain(self) -> None:
        try:
            self._drain_all()
        except Exception:  # a sink that fails must not take the sender thread with it
            log.exception("sending a generated response failed")

    def _drain_all(self) -> None:
        while True:
            with self._lock:
                text = "".join(self._text) if self._text else None
                self._text.clear()
                error, final = self._error, self._final
                self._error = None
                if text is None and error is None and not final:
                    self._scheduled = False
                    return
                if final:
                    self._scheduled = True  # stays: nothing is posted after the end
            if error is not None and text is not None:
                self._send(text, None, False)
                self._send(None, error, True)
            else:
                self._send(text, error, final)
            if final:
                return


class StreamSender:
    """The sender threads of one model (started on first use, at most ``threads``)."""

    def __init__(self, threads: int, name: str) -> None:
        self._pool = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix=f"inferd-send {name}"
        )

    def outbox(self, send: Send) -> Outbox:
        return Outbox(self, send)

    def schedule(self, work: Callable[[], None]) -> None:
        try:
            self._pool.submit(work)
        except RuntimeError:  # closed: the model is going away; end the request here
            work()

    def close(self) -> None:
        """Stop taking work; what is queued still runs (a closing model ends its requests)."""
        self._pool.shutdown(wait=False)
