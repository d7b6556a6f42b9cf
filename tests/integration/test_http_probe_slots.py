"""The HTTP edge at its connection limit, over real sockets: health probes are never starved.

``start_http_server`` runs on the test's event loop with a small ASGI app that reads each request
body before it answers (so a request whose body has not arrived keeps its connection busy) and
answers ``/v2/health/ready`` only once the test lets it (so a probe can be kept answering).
Waiting is on socket reads; a read ends when the server answers or closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import pytest

from inferd.frontends.http.server import HttpServer, start_http_server

Message = MutableMapping[str, Any]
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
READ_LIMIT_S = 20.0  # a bound against hanging, below the 30 s timeouts the servers here use
LONG_S = 30.0

PING = b"GET /ping HTTP/1.1\r\nHost: test\r\n\r\n"
LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: test\r\n\r\n"
READY = b"GET /v2/health/ready HTTP/1.1\r\nHost: test\r\n\r\n"
MODEL_READY = b"GET /v2/models/simple/versions/1/ready HTTP/1.1\r\nHost: test\r\n\r\n"
SLOW_POST_HEAD = b"POST /ping HTTP/1.1\r\nHost: test\r\nContent-Length: 4\r\n\r\nab"


class _App:
    """Answers every path with ``{"path": ...}`` after reading the whole body; holds
    ``/v2/health/ready`` until :attr:`release` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        assert scope["type"] == "http"
        more = True
        while more:
            message = await receive()
            more = bool(message.get("more_body"))
        if scope["path"] == "/v2/health/ready":
            await self.release.wait()
        body = json.dumps({"path": scope["path"]}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _serve(app: _App, **kwargs: Any) -> HttpServer:
    kwargs.setdefault("probe_head_timeout_s", LONG_S)
    handle, _ = await start_http_server(
        app,
        "127.0.0.1",
        0,
        header_timeout_s=LONG_S,
        timeout_keep_alive_s=LONG_S,
        max_connections=2,
        **kwargs,
    )
    return handle


@pytest.fixture
async def app() -> _App:
    return _App()


@pytest.fixture
async def server(app: _App) -> AsyncIterator[HttpServer]:
    """Two connections at most, two probe slots; nothing times out while a test runs."""
    handle = await _serve(app, probe_slots=2)
    try:
        yield handle
    finally:
        app.release.set()
        await handle.stop(0.5)


async def _connect(handle: HttpServer) -> Streams:
    return await asyncio.open_connection("127.0.0.1", handle.port)


async def _read_to_eof(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), READ_LIMIT_S)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], Any]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_LIMIT_S)
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    body = await asyncio.wait_for(
        reader.readexactly(int(headers.get("content-length", 0))), READ_LIMIT_S
    )
    return int(lines[0].split(" ", 2)[1]), headers, json.loads(body)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):  # the server may have closed first
        await writer.wait_closed()


async def _admitted(handle: HttpServer, count: int) -> None:
    """Wait until the server has admitted ``count`` connections (it sees them when its loop
    runs)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READ_LIMIT_S
    while len(handle.connections) < count:
        assert loop.time() < deadline, "the server did not admit the connections"
        await asyncio.sleep(0.01)


async def _busy(handle: HttpServer, count: int = 2) -> list[Streams]:
    """``count`` connections whose request body has not all arrived: busy, not idle."""
    streams = [await _connect(handle) for _ in range(count)]
    for _, writer in streams:
        writer.write(SLOW_POST_HEAD)
        await writer.drain()
    await _admitted(handle, count)
    return streams


async def _finish_busy(streams: list[Streams]) -> None:
    for reader, writer in streams:  # the busy connections were never disturbed
        writer.write(b"cd")
        assert (await _read_response(reader))[0] == 200
        await _close(writer)


async def test_silent_connections_make_room_longest_silent_first(server: HttpServer) -> None:
    first = await _connect(server)
    await _admitted(server, 1)
    second = await _connect(server)
    await _admitted(server, 2)

    reader, writer = await _connect(server)
    writer.write(LIVE)
    status, headers, body = await _read_response(reader)
    assert (status, body) == (200, {"path": "/v2/health/live"})
    assert headers.get("connection") != "close"  # a slot of its own: it is kept alive
    assert await _read_to_eof(first[0]) == b""  # the longest silent was closed without a word
    second[1].write(PING)  # the other silent one still has its slot
    assert (await _read_response(second[0]))[0] == 200
    writer.write(PING)
    assert (await _read_response(reader))[0] == 200
    for w in (first[1], second[1], writer):
        await _close(w)


@pytest.mark.parametrize(
    ("request_head", "path"),
    [
        (LIVE, "/v2/health/live"),
        (READY, "/v2/health/ready"),
        (MODEL_READY, "/v2/models/simple/versions/1/ready"),
    ],
)
async def test_a_probe_is_answered_when_every_slot_is_busy(
    server: HttpServer, request_head: bytes, path: str
) -> None:
    busy = await _busy(server)
    reader, writer = await _connect(server)
    writer.write(request_head)
    status, headers, body = await _read_response(reader)
    assert (status, body) == (200, {"path": path})
    assert headers["connection"] == "close"  # a probe slot answers once
    assert await _read_to_eof(reader) == b""
    await _close(writer)
    await _finish_busy(busy)


@pytest.mark.parametrize(
    "request_bytes",
    [
        PING,
        b'POST /v2/models/simple/infer HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\n{"a":',
        b"POST /v2/health/live HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n",
        b"GET /v2/models/a%2Fb/ready HTTP/1.1\r\nHost: test\r\n\r\n",
        PING + PING + LIVE,  # pipelined: one answer, then the connection ends
    ],
)
async def test_other_requests_beyond_busy_slots_get_503(
    server: HttpServer, request_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    busy = await _busy(server)
    reader, writer = await _connect(server)
    writer.write(request_bytes)
    reply = await _read_to_eof(reader)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ")
    error = json.loads(body)["error"]
    assert "limit of 2 open HTTP connections" in error
    assert "--http-max-connections" in error
    assert "only health probes" in error
    await _close(writer)
    assert len(server.connections) == 2  # the refused one is not counted
    await _finish_busy(busy)
    assert not caplog.records  # neither the parser nor the event loop complained


async def test_a_probe_slot_waits_for_its_request_briefly(app: _App) -> None:
    handle = await _serve(app, probe_head_timeout_s=0.5)  # the header timeout is 30 s
    try:
        busy = await _busy(handle)
        reader, writer = await _connect(handle)  # sends nothing
        assert await _read_to_eof(reader) == b""  # within READ_LIMIT_S, so not the 30 s
        await _close(writer)
        await _finish_busy(busy)
    finally:
        await handle.stop(0.5)


async def test_the_longest_waiting_probe_slot_makes_room(server: HttpServer) -> None:
    busy = await _busy(server)
    waiting = []
    for _ in range(2):  # both probe slots taken by connections that send nothing
        waiting.append(await _connect(server))
        await _admitted(server, 2 + len(waiting))

    reader, writer = await _connect(server)
    writer.write(LIVE)
    assert (await _read_response(reader))[:1] == (200,)
    assert await _read_to_eof(waiting[0][0]) == b""  # the longest waiting made room
    waiting[1][1].write(LIVE)  # the other still has its probe slot
    assert (await _read_response(waiting[1][0]))[0] == 200
    for w in (writer, waiting[0][1], waiting[1][1]):
        await _close(w)
    await _finish_busy(busy)


async def test_beyond_probe_slots_all_answering_a_connection_gets_503(
    app: _App, server: HttpServer
) -> None:
    busy = await _busy(server)
    app.release.clear()
    answering = []
    for _ in range(2):  # both probe slots answering a readiness probe that waits
        answering.append(await _connect(server))
        answering[-1][1].write(READY)
        await answering[-1][1].drain()
        await _admitted(server, 2 + len(answering))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READ_LIMIT_S
    while any(c.cycle is None for c in server.connections):  # wait for both heads to arrive
        assert loop.time() < deadline
        await asyncio.sleep(0.01)

    reader, writer = await _connect(server)
    writer.write(LIVE)
    reply = await _read_to_eof(reader)
    assert reply.startswith(b"HTTP/1.1 503 ")
    assert b"limit of 2 open HTTP connections" in reply
    await _close(writer)

    app.release.set()
    for reader, writer in answering:
        assert (await _read_response(reader))[0] == 200
        await _close(writer)
    await _finish_busy(busy)
