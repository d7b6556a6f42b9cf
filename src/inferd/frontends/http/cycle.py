"""One HTTP/1.1 request/response cycle: the ASGI 3 ``receive`` and ``send`` of one request.

The request body reaches ``receive()`` as ``http.request`` messages (``more_body`` while more is
coming), and ``http.disconnect`` once the client has gone or the response is complete. ``send()``
takes one ``http.response.start`` and then ``http.response.body`` messages. The response head
is held back and leaves in the same transport write as the first body bytes: one system call and
one TCP segment for a small response. A response without ``Content-Length`` (a stream such as
``generate_stream``'s server-sent events) goes out in chunked transfer-encoding. A ``HEAD``
request's response carries its head only. Writing waits while the transport has asked the
connection to pause (:class:`Flow`).
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
App = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]

HIGH_WATER_BYTES = 64 * 1024  # a request body buffered past this pauses reading
JOIN_LIMIT = 256 * 1024  # bodies up to this size leave in one write with their head
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

_log = logging.getLogger(__name__)
_BAD_NAME = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
_BAD_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")


def _status_line(code: int) -> bytes:
    try:
        phrase = http.HTTPStatus(code).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {code} {phrase}\r\n".encode("latin-1")


STATUS_LINES = {code: _status_line(code) for code in range(100, 600)}


def error_response(status: int, message: str) -> bytes:
    """A complete ``{"error": message}`` response that closes the connection."""
    body = json.dumps({"error": message}).encode()
    head = (
        b"%scontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
        % (STATUS_LINES[status], len(body))
    )
    return head + body


class Flow:
    """One connection's flow control: reading paused while the app is behind on a request body
    (or a pipelined request waits), writing paused while the transport's buffer is full."""

    __slots__ = ("_drained", "_loop", "_transport", "read_paused", "write_paused")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._drained: asyncio.Future[None] | None = None
        self.read_paused = False
        self.write_paused = False

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self._transport.resume_reading()

    def pause_writing(self) -> None:
        if not self.write_paused:
            self.write_paused = True
            self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        if self.write_paused:
            self.write_paused = False
            drained, self._drained = self._drained, None
            if drained is not None and not drained.done():
                drained.set_result(None)

    async def drain(self) -> None:
        drained = self._drained
        if drained is not None:
            await asyncio.shield(drained)


class Cycle:
    """The ASGI side of one request. The connection feeds :attr:`body`, :attr:`more_body` and
    :attr:`disconnected` and sets :attr:`event`; ``on_response`` runs once the response is
    complete."""

    __slots__ = (
        "_chunked",
        "_date",
        "_head",
        "_is_head",
        "_on_response",
        "_remaining",
        "body",
        "disconnected",
        "event",
        "flow",
        "keep_alive",
        "more_body",
        "response_complete",
        "response_started",
        "scope",
        "transport",
        "waiting_for_100_continue",
    )

    def __init__(
        self,
        scope: Scope,
        transport: asyncio.Transport,
        flow: Flow,
        *,
        keep_alive: bool,
        expect_100_continue: bool,
        date: Callable[[], bytes],
        on_response: Callable[[], None],
    ) -> None:
        self.scope = scope
        self.transport = transport
        self.flow = flow
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        self._date = date
        self._on_response = on_response
        self.event = asyncio.Event()
        self.body = bytearray()
        self.more_body = True
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        self._head: bytes | None = None
        self._chunked = False
        self._remaining = 0
        self._is_head = scope["method"] == "HEAD"

    async def run(self, app: App) -> None:
        try:
            await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and self.disconnected:
                return
            _log.error("the HTTP request %s %s failed", self.scope["method"], self.scope["path"])
            _log.debug("the failure", exc_info=exc)
            if not self.response_started and not self.disconnected:
                self.keep_alive = False
                self.transport.write(error_response(500, "internal error"))
                self.transport.close()
            else:
                self._abort()
            if not isinstance(exc, Exception):
                raise
        else:
            if not self.response_complete and not self.disconnected:
                _log.error("the HTTP app returned without completing its response")
                if not self.response_started:
                    self.transport.write(error_response(500, "internal error"))
                self._abort()
        finally:
            self._on_response = _nothing

    def _abort(self) -> None:
        head, self._head = self._head, None
        if head is not None and not self.transport.is_closing():
            self.transport.write(head)
        self.transport.close()

    async def receive(self) -> Message:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(CONTINUE)
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            self.flow.resume_reading()
            await self.event.wait()
            self.event.clear()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        message = {"type": "http.request", "body": bytes(self.body), "more_body": self.more_body}
        self.body = bytearray()
        return message

    async def send(self, message: Message) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got '{message['type']}'")
            self._start(message["status"], message.get("headers", ()))
        elif not self.response_complete:
            if message["type"] != "http.response.body":
                raise RuntimeError(f"expected 'http.response.body', got '{message['type']}'")
            self._body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"'{message['type']}' sent after the response was complete")

    def _start(self, status: int, headers: Any) -> None:
        self.response_started = True
        self.waiting_for_100_continue = False
        parts = [STATUS_LINES.get(status) or _status_line(status), self._date()]
        length: int | None = None
        close = False
        for name, value in headers:
            if _BAD_NAME.search(name) or _BAD_VALUE.search(value):
                raise RuntimeError(f"invalid HTTP response header {name!r}")
            name = name.lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                continue  # the framing is this module's
            elif name == b"connection" and b"close" in value.lower():
                self.keep_alive = False
                close = True
            parts += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not close:
            parts.append(b"connection: close\r\n")
        if length is not None:
            self._remaining = length
        elif not self._is_head and status not in (204, 304):
            self._chunked = True
            parts.append(b"transfer-encoding: chunked\r\n")
        parts.append(b"\r\n")
        self._head = b"".join(parts)

    def _body(self, body: bytes, more_body: bool) -> None:
        if self._is_head:
            data = b""
            self._remaining = 0
        elif self._chunked:
            data = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            if not more_body:
                data += b"0\r\n\r\n"
        else:
            self._remaining -= len(body)
            if self._remaining < 0:
                raise RuntimeError("the response body is longer than its Content-Length")
            data = body
        head = self._head
        write = self.transport.write
        if head is not None:
            self._head = None
            if len(data) <= JOIN_LIMIT:
                write(head + data)
            else:  # a large body is not copied to save one call
                write(head)
                write(data)
        elif data:
            write(data)
        if not more_body:
            if self._remaining != 0:
                raise RuntimeError("the response body is shorter than its Content-Length")
            self.response_complete = True
            self.event.set()
            if not self.keep_alive:
                self.transport.close()
            self._on_response()


def _nothing() -> None:
    return None


__all__ = ["HIGH_WATER_BYTES", "JOIN_LIMIT", "STATUS_LINES", "Cycle", "Flow", "error_response"]
