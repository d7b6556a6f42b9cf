"""inferd's own HTTP/1.1 connection protocol (``frontends/http/connection.py``, ``cycle.py``) on
a real socket: ``start_http_server`` runs on the test's loop with a small ASGI app, and each test
reads the exact bytes the protocol writes. Waiting is on socket reads, bounded by READ_LIMIT_S.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import httptools
import pytest

from inferd.frontends.http.server import HttpServer, start_http_server

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
READ_LIMIT_S = 20.0  # a bound against hanging, far above anything under test
SRC = Path(__file__).resolve().parents[2] / "src"


class _App:
    """Echoes the request (method, path, body) as JSON; ``/slow`` waits for :attr:`release`,
    ``/stream`` answers three chunks without Content-Length, ``/watch`` answers and then waits
    for ``http.disconnect``."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.arrived = asyncio.Event()  # a /slow request is waiting for release
        self.disconnected = asyncio.Event()
        self.body_messages: list[tuple[int, bool]] = []

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for part in (b"one", b"two", b"three"):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        body = b""
        while True:
            message = await receive()
            assert message["type"] == "http.request"
            body += message["body"]
            self.body_messages.append((len(message["body"]), message["more_body"]))
            if not message["more_body"]:
                break
        if path == "/slow":
            self.arrived.set()
            await self.release.wait()
        reply = json.dumps(
            {"method": scope["method"], "path": path, "body": len(body), "v": scope["http_version"]}
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(reply))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if path == "/watch":
            await send({"type": "http.response.body", "body": reply, "more_body": True})
            if (await receive())["type"] == "http.disconnect":
                self.disconnected.set()
            return
        await send({"type": "http.response.body", "body": reply})


@pytest.fixture
def app() -> _App:
    return _App()


@pytest.fixture
async def server(app: _App) -> AsyncIterator[HttpServer]:
    handle, _ = await start_http_server(app, "127.0.0.1", 0, header_timeout_s=5.0)
    try:
        yield handle
    finally:
        await handle.stop(0.5)


async def _connect(handle: HttpServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", handle.port)


class _Responses:
    """httptools' response parser over what the server sent: status, headers, body per answer."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.done: list[tuple[int, dict[bytes, bytes], bytes]] = []
        self._headers: dict[bytes, bytes] = {}
        self._body = b""

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        self.done.append((self.parser.get_status_code(), self._headers, self._body))
        self._headers, self._body = {}, b""


async def _read_responses(
    reader: asyncio.StreamReader, count: int, *, head: bool = False
) -> list[tuple[int, dict[bytes, bytes], bytes]]:
    responses = _Responses()
    while len(responses.done) < count:
        data = await asyncio.wait_for(reader.read(65536), READ_LIMIT_S)
        assert data, f"the server closed after {len(responses.done)} of {count} responses"
        if head:  # the parser would wait for a body a HEAD answer does not carry
            assert data.endswith(b"\r\n\r\n")
            return [(int(data.split()[1]), {}, data)]
        responses.parser.feed_data(data)
    return responses.done


async def _read_to_eof(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), READ_LIMIT_S)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def test_pipelined_requests_are_answered_in_order(app: _App, server: HttpServer) -> None:
    reader, writer = await _connect(server)
    writer.write(
        b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n"
        b"POST /fast HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"
        b"GET /last HTTP/1.1\r\nHost: t\r\n\r\n"
    )
    await writer.drain()
    await asyncio.wait_for(app.arrived.wait(), READ_LIMIT_S)  # the others arrive as it waits
    app.release.set()
    answers = await _read_responses(reader, 3)
    paths = [json.loads(body)["path"] for _, _, body in answers]
    assert paths == ["/slow", "/fast", "/last"]
    assert json.loads(answers[1][2])["body"] == 3
    assert all(b"date" in headers for _, headers, _ in answers)
    await _close(writer)


async def test_a_response_without_content_length_is_chunked(server: HttpServer) -> None:
    reader, writer = await _connect(server)
    writer.write(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
    raw = b""
    while not raw.endswith(b"0\r\n\r\n"):
        chunk = await asyncio.wait_for(reader.read(65536), READ_LIMIT_S)
        assert chunk
        raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert b"transfer-encoding: chunked" in head.lower()
    assert b"content-length" not in head.lower()
    assert body == b"3\r\none\r\n3\r\ntwo\r\n5\r\nthree\r\n0\r\n\r\n"
    writer.write(b"GET /again HTTP/1.1\r\nHost: t\r\n\r\n")  # the connection is still usable
    assert json.loads((await _read_responses(reader, 1))[0][2])["path"] == "/again"
    await _close(writer)


async def test_the_app_hears_that_the_client_went_away(app: _App, server: HttpServer) -> None:
    reader, writer = await _connect(server)
    writer.write(b"GET /watch HTTP/1.1\r\nHost: t\r\n\r\n")
    assert await asyncio.wait_for(reader.read(4096), READ_LIMIT_S)
    assert not app.disconnected.is_set()
    await _close(writer)
    await asyncio.wait_for(app.disconnected.wait(), READ_LIMIT_S)


async def test_expect_100_continue_is_answered_when_the_body_is_read(server: HttpServer) -> None:
    reader, writer = await _connect(server)
    writer.write(
        b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
    )
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_LIMIT_S)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"data")
    ((status, _, body),) = await _read_responses(reader, 1)
    assert status == 200
    assert json.loads(body)["body"] == 4
    await _close(writer)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n",
        b"GET /\x01 HTTP/1.1\r\n\r\n",
        b"NOT HTTP AT ALL\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
async def test_a_malformed_request_gets_400_naming_the_problem(
    server: HttpServer, request_bytes: bytes
) -> None:
    reader, writer = await _connect(server)
    writer.write(request_bytes)
    reply = await _read_to_eof(reader)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request")
    assert b"content-type: application/json" in head
    assert json.loads(body)["error"].startswith("malformed HTTP request: ")
    await _close(writer)


async def test_a_malformed_request_after_a_good_one_is_answered_after_it(
    app: _App, server: HttpServer
) -> None:
    reader, writer = await _connect(server)
    writer.write(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\nBROKEN\x00\r\n\r\n")
    await writer.drain()
    await asyncio.wait_for(app.arrived.wait(), READ_LIMIT_S)
    app.release.set()
    reply = await _read_to_eof(reader)
    first, _, rest = reply.partition(b"HTTP/1.1 400 Bad Request")
    assert first.startswith(b"HTTP/1.1 200 OK")
    assert b'"path": "/slow"' in first
    assert b"malformed HTTP request" in rest
    await _close(writer)


async def test_head_requests_get_the_head_only(server: HttpServer) -> None:
    reader, writer = await _connect(server)
    writer.write(b"HEAD /thing HTTP/1.1\r\nHost: t\r\n\r\n")
    ((status, _, raw),) = await _read_responses(reader, 1, head=True)
    assert status == 200
    assert b"content-length: " in raw
    writer.write(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n")  # nothing stray precedes this answer
    assert json.loads((await _read_responses(reader, 1))[0][2])["path"] == "/next"
    await _close(writer)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /old HTTP/1.0\r\n\r\n",
        b"GET /old HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    ],
)
async def test_http_1_0_and_connection_close_end_the_connection(
    server: HttpServer, request_bytes: bytes
) -> None:
    reader, writer = await _connect(server)
    writer.write(request_bytes)
    reply = await _read_to_eof(reader)  # ends: the server closed after answering
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert b"connection: close" in head
    assert json.loads(body)["path"] == "/old"
    await _close(writer)


async def test_a_large_body_reaches_the_app_in_parts(app: _App, server: HttpServer) -> None:
    size = 1024 * 1024
    reader, writer = await _connect(server)
    writer.write(b"POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size)
    writer.write(b"x" * size)
    ((status, _, body),) = await _read_responses(reader, 1)
    assert status == 200
    assert json.loads(body)["body"] == size
    assert len(app.body_messages) > 1
    assert app.body_messages[-1][1] is False
    assert all(more for _, more in app.body_messages[:-1])
    await _close(writer)


async def test_stop_lets_a_response_in_flight_finish_and_closes_idle_connections(
    app: _App,
) -> None:
    handle, _ = await start_http_server(app, "127.0.0.1", 0)
    idle_reader, idle_writer = await _connect(handle)
    idle_writer.write(b"GET /idle HTTP/1.1\r\nHost: t\r\n\r\n")
    await _read_responses(idle_reader, 1)
    busy_reader, busy_writer = await _connect(handle)
    busy_writer.write(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
    await asyncio.wait_for(app.arrived.wait(), READ_LIMIT_S)
    stopping = asyncio.ensure_future(handle.stop(READ_LIMIT_S))
    assert await _read_to_eof(idle_reader) == b""  # closed at once, between requests
    app.release.set()
    reply = await _read_to_eof(busy_reader)
    assert reply.startswith(b"HTTP/1.1 200 OK")
    assert b"connection: close" in reply
    await asyncio.wait_for(stopping, READ_LIMIT_S)
    assert not handle.connections
    await _close(idle_writer)
    await _close(busy_writer)


async def test_stop_after_its_grace_period_closes_what_is_still_running(app: _App) -> None:
    handle, _ = await start_http_server(app, "127.0.0.1", 0)
    reader, writer = await _connect(handle)
    writer.write(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")  # never released
    await asyncio.wait_for(app.arrived.wait(), READ_LIMIT_S)
    await asyncio.wait_for(handle.stop(0.2), READ_LIMIT_S)
    reply = await _read_to_eof(reader)
    assert reply == b"" or reply.startswith(b"HTTP/1.1 500 ")
    assert not handle.connections
    await _close(writer)


CHUNK = 1024 * 1024


async def test_send_waits_while_the_client_is_not_reading() -> None:
    """A stream to a client that does not read: the app's ``send`` waits for the transport to
    drain (``pause_writing``), so the server buffers about one chunk, not the whole answer."""
    buffered: list[int] = []
    first_sent = asyncio.Event()
    handle: HttpServer | None = None

    async def stream(scope: Message, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(48):
            await send({"type": "http.response.body", "body": b"x" * CHUNK, "more_body": True})
            assert handle is not None
            buffered.extend(c.transport.get_write_buffer_size() for c in handle.connections)
            first_sent.set()
        await send({"type": "http.response.body", "body": b""})

    handle, _ = await start_http_server(stream, "127.0.0.1", 0)
    try:
        reader, writer = await _connect(handle)
        writer.write(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
        await asyncio.wait_for(first_sent.wait(), READ_LIMIT_S)
        await asyncio.sleep(0.2)  # room for the app to run ahead, were nothing holding it
        received, tail = 0, b""
        while tail != b"0\r\n\r\n":  # the stream's end
            raw = await asyncio.wait_for(reader.read(CHUNK), READ_LIMIT_S)
            assert raw
            received += len(raw)
            tail = (tail + raw)[-5:]
        assert received > 48 * CHUNK
        assert max(buffered) <= 2 * CHUNK
        await _close(writer)
    finally:
        await handle.stop(0.5)


def test_no_module_in_src_imports_uvicorn() -> None:
    """The HTTP edge is inferd's own, on public APIs (httptools, asyncio): no uvicorn internals
    to break with its next release."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                names = [node.module]
            if any(name == "uvicorn" or name.startswith("uvicorn.") for name in names):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert SRC.joinpath("inferd", "frontends", "http", "server.py").is_file()
    assert not offenders, f"modules importing uvicorn: {offenders}"
