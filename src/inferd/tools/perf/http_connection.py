"""The part of the load generator's HTTP/1.1 connections that does not depend on what they ask.

:mod:`inferd.tools.perf.http_client` (v2 requests) and :mod:`inferd.tools.perf.openai_client`
(``/v1`` requests) each keep one request in flight per keep-alive connection and read its
answer with httptools; this base owns the transport, feeds the parser, and fails the waiting
request with one wording when the answer is malformed or the server closes the connection.
A subclass sets ``_parser`` and ``_waiter`` and adds httptools' callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any, cast

import httptools

from inferd.errors import PerfRequestError

__all__ = ["HttpAnswerConnection", "set_nodelay"]


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Send every request at once: no waiting for the server's delayed ACK."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class HttpAnswerConnection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    _parser: httptools.HttpResponseParser
    _waiter: asyncio.Future[Any] | None

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._waiter = None
        self.open = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.open = True
        set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(f"malformed HTTP answer from the server ({exc})")
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self._fail("the server closed the connection" + (f" ({exc})" if exc else ""))

    def _fail(self, message: str) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(PerfRequestError(message))

    def close(self) -> None:
        self.open = False
        if self._transport is not None:
            self._transport.close()
