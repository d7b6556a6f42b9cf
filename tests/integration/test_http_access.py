"""The HTTP edge's connection protocol over real sockets, and its route table.

``start_http_server`` runs on the test's event loop with a minimal ASGI app, so each test sees
exactly the bytes the protocol writes: the header timeout, the idle timeout and the connection
limit (what happens at the limit in detail: test_http_probe_slots.py). Waiting is on socket
reads; a read ends when the server answers or closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from inferd.errors import InvalidArgumentError
from inferd.frontends.access import Api
from inferd.frontends.http.routes import API, Endpoint, match_route
from inferd.frontends.http.server import HttpServer, start_http_server
from inferd.frontends.http.tls import server_ssl_context
from inferd.frontends.tls import TlsSettings

Message = MutableMapping[str, Any]
READ_LIMIT_S = 20.0  # a bound against hanging, far above every timeout under test

REQUEST = b"GET /ping HTTP/1.1\r\nHost: test\r\n\r\n"


async def _ping_app(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    assert scope["type"] == "http"
    body = b'{"ok":true}'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def limited() -> AsyncIterator[HttpServer]:
    handle, _ = await start_http_server(
        _ping_app,
        "127.0.0.1",
        0,
        header_timeout_s=0.5,
        timeout_keep_alive_s=0.5,
        max_connections=2,
    )
    try:
        yield handle
    finally:
        await handle.stop(0.5)


@pytest.fixture
async def two_connections() -> AsyncIterator[HttpServer]:
    """At most two connections, kept open between requests for longer than the tests last."""
    handle, _ = await start_http_server(
        _ping_app, "127.0.0.1", 0, header_timeout_s=0.5, timeout_keep_alive_s=30, max_connections=2
    )
    try:
        yield handle
    finally:
        await handle.stop(0.5)


async def _connect(handle: HttpServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", handle.port)


async def _read_to_eof(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), READ_LIMIT_S)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_LIMIT_S)
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = await asyncio.wait_for(reader.readexactly(length), READ_LIMIT_S)
    return status, body


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):  # the server may have closed first
        await writer.wait_closed()


def _split(reply: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


# -- header timeout ---------------------------------------------------------------------------


async def test_half_a_request_head_gets_408_then_the_connection_closes(
    limited: HttpServer,
) -> None:
    reader, writer = await _connect(limited)
    writer.write(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: test\r\nContent-")
    await writer.drain()
    status, body = _split(await _read_to_eof(reader))
    assert status == 408
    assert "--http-header-timeout-secs" in body["error"]
    assert "0.5 s" in body["error"]
    await _close(writer)


async def test_a_head_trickled_byte_by_byte_is_cut_off(limited: HttpServer) -> None:
    """The deadline runs from the first incomplete read; more bytes do not extend it."""
    reader, writer = await _connect(limited)
    head = b"GET /ping HTTP/1.1\r\nHost: test\r\nX-Slow: " + b"a" * 200
    for byte in head:
        if reader.at_eof() or writer.is_closing():
            break
        writer.write(bytes([byte]))
        with contextlib.suppress(TimeoutError):  # paces the bytes; EOF ends it early
            await asyncio.wait_for(reader.read(1 << 16), 0.05)
        if reader.at_eof():
            break
    else:
        pytest.fail("the server kept reading a head that took longer than its timeout")
    await _close(writer)


async def test_a_connection_that_sends_nothing_is_closed(limited: HttpServer) -> None:
    reader, writer = await _connect(limited)
    assert await _read_to_eof(reader) == b""  # closed without a word: no request had begun
    await _close(writer)


async def test_the_header_timeout_restarts_for_each_request(limited: HttpServer) -> None:
    """Requests on one keep-alive connection each get the full header timeout."""
    reader, writer = await _connect(limited)
    for _ in range(3):
        writer.write(REQUEST)
        assert await _read_response(reader) == (200, b'{"ok":true}')
        await asyncio.sleep(0.3)  # < idle timeout; the three together exceed the header timeout
    await _close(writer)


async def test_an_idle_keep_alive_connection_is_closed(limited: HttpServer) -> None:
    reader, writer = await _connect(limited)
    writer.write(REQUEST)
    assert await _read_response(reader) == (200, b'{"ok":true}')
    assert await _read_to_eof(reader) == b""
    await _close(writer)


# -- connection limit -------------------------------------------------------------------------


async def test_at_the_limit_a_new_connection_takes_the_longest_idle_slot(
    two_connections: HttpServer,
) -> None:
    limited = two_connections
    first = await _connect(limited)
    second = await _connect(limited)
    for reader, writer in (first, second):
        writer.write(REQUEST)
        assert await _read_response(reader) == (200, b'{"ok":true}')
    second[1].write(REQUEST)  # the second is busy last: the first has been idle the longest
    assert await _read_response(second[0]) == (200, b'{"ok":true}')

    reader, writer = await _connect(limited)
    writer.write(REQUEST)
    assert await _read_response(reader) == (200, b'{"ok":true}')
    assert await _read_to_eof(first[0]) == b""  # closed without a word to make room
    second[1].write(REQUEST)  # the others are unaffected
    assert await _read_response(second[0]) == (200, b'{"ok":true}')
    writer.write(REQUEST)
    assert await _read_response(reader) == (200, b'{"ok":true}')
    for w in (first[1], second[1], writer):
        await _close(w)


async def test_no_limit_by_default() -> None:
    handle, _ = await start_http_server(_ping_app, "127.0.0.1", 0)
    try:
        streams = [await _connect(handle) for _ in range(8)]
        for reader, writer in streams:
            writer.write(REQUEST)
            assert await _read_response(reader) == (200, b'{"ok":true}')
        for _, writer in streams:
            await _close(writer)
    finally:
        await handle.stop(0.5)


# -- routes -----------------------------------------------------------------------------------


def test_every_endpoint_belongs_to_one_api_group_as_in_triton() -> None:
    assert set(API) == set(Endpoint)
    assert API[Endpoint.MODEL_READY] is Api.HEALTH  # Triton checks model readiness as health
    assert API[Endpoint.MODEL_METADATA] is Api.METADATA
    assert API[Endpoint.SERVER_METADATA] is Api.METADATA
    assert API[Endpoint.MODEL_INFER] is Api.INFERENCE
    assert API[Endpoint.MODEL_CONFIG] is Api.MODEL_CONFIG
    assert {API[Endpoint.MODEL_STATS], API[Endpoint.ALL_STATS]} == {Api.STATISTICS}
    assert {
        API[e]
        for e in (Endpoint.REPOSITORY_INDEX, Endpoint.REPOSITORY_LOAD, Endpoint.REPOSITORY_UNLOAD)
    } == {Api.MODEL_REPOSITORY}


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/v2/models/a%2Fb/ready", "must not contain '/'"),
        ("/v2/models/%2E%2E/config", "must not be '.' or '..'"),
        ("/v2/models/..", "must not be '.' or '..'"),
        ("/v2/models/a%00b/infer", "control characters"),
        ("/v2/models/%20x/stats", "whitespace"),
        ("/v2/models/%FF%FE", "not valid UTF-8"),
        ("/v2/models/" + "m" * 256 + "/versions/1", "at most 255"),
        ("/v2/repository/models/a%5Cb/load", "must not contain '/' or '\\'"),
        ("/v2/repository/models/%2E/unload", "must not be '.' or '..'"),
    ],
)
def test_model_names_in_paths_are_checked_after_decoding(path: str, why: str) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid model name") as caught:
        match_route(path)
    assert why in str(caught.value)


def test_plain_and_encoded_good_names_route() -> None:
    route = match_route("/v2/models/simple_v2.onnx/versions/3/infer")
    assert route is not None
    assert (route.endpoint, route.model, route.version) == (
        Endpoint.MODEL_INFER,
        "simple_v2.onnx",
        "3",
    )
    route = match_route("/v2/models/caf%C3%A9/ready")
    assert route is not None
    assert route.model == "café"


# -- TLS settings -----------------------------------------------------------------------------


def test_unusable_tls_files_are_refused_naming_the_file(tmp_path: Path) -> None:
    missing = TlsSettings(tmp_path / "missing.pem", tmp_path / "missing.key")
    with pytest.raises(InvalidArgumentError, match=r"missing\.pem"):
        server_ssl_context(missing)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(InvalidArgumentError, match=r"garbage\.pem"):
        server_ssl_context(TlsSettings(garbage, garbage))
