"""The body timeout of the HTTP edge over real sockets: a body that stops arriving is cut off
with 408, a slow body that keeps arriving is served."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import pytest

from inferd.frontends.http.server import HttpServer, start_http_server

Message = MutableMapping[str, Any]
READ_LIMIT_S = 20.0  # a bound against hanging, far above the timeout under test


async def _echo_length_app(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    """Reads the whole body, answers with its length."""
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = json.dumps({"size": size}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    handle, _ = await start_http_server(
        _echo_length_app, "127.0.0.1", 0, header_timeout_s=5.0, body_timeout_s=0.5
    )
    try:
        yield handle
    finally:
        await handle.stop(0.5)


def _head(length: int) -> bytes:
    return f"POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: {length}\r\n\r\n".encode()


async def test_a_body_that_stops_arriving_gets_408(server: HttpServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(_head(100) + b"x" * 10)
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(), READ_LIMIT_S)  # to EOF: the server closes
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert "--http-body-timeout-secs" in json.loads(body)["error"]
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def test_a_slow_body_that_keeps_arriving_is_served(server: HttpServer) -> None:
    """Ten pieces 0.2 s apart take four times the timeout, but each pause is shorter."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(_head(100))
    for _ in range(10):
        await asyncio.sleep(0.2)
        writer.write(b"y" * 10)
        await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_LIMIT_S)
    assert head.startswith(b"HTTP/1.1 200")
    assert b'{"size": 100}' in await asyncio.wait_for(reader.read(13), READ_LIMIT_S)
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def test_requests_without_a_body_arm_no_body_timer(server: HttpServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /x HTTP/1.1\r\nHost: test\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_LIMIT_S)
    assert head.startswith(b"HTTP/1.1 200")
    assert await asyncio.wait_for(reader.readexactly(11), READ_LIMIT_S) == b'{"size": 0}'
    await asyncio.sleep(1.0)  # twice the body timeout: a stray timer would close or answer 408
    writer.write(b"GET /x HTTP/1.1\r\nHost: test\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_LIMIT_S)
    assert head.startswith(b"HTTP/1.1 200")
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
