"""The load generator opens its HTTP and gRPC connections through one function: a refused
connection and a failed TLS handshake read the same for both clients, naming the server."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest

from inferd.client.tls import GrpcTlsSettings, HttpsSettings
from inferd.errors import PerfRequestError
from inferd.tools.perf.connect import open_connection
from inferd.tools.perf.grpc_client import GrpcTransport
from inferd.tools.perf.http_client import HttpTransport


@pytest.fixture
async def plain_server() -> AsyncIterator[int]:
    """A TCP server on an ephemeral port that answers whatever it is sent with plain text, as
    a server without TLS answers a TLS client hello."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client gives up
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_a_refused_connection_names_the_server_and_the_protocol() -> None:
    for transport, over in (
        (HttpTransport("127.0.0.1:1", "m"), "HTTP"),
        (GrpcTransport("127.0.0.1:1", "m"), "gRPC"),
    ):
        try:
            with pytest.raises(
                PerfRequestError, match=rf"^cannot connect to 127\.0\.0\.1:1 over {over} \(.+\)$"
            ):
                await transport.connect()
        finally:
            await transport.close()


async def test_a_failed_tls_handshake_says_so_for_both_clients(plain_server: int) -> None:
    url = f"127.0.0.1:{plain_server}"
    for transport in (
        HttpTransport(url, "m", tls=HttpsSettings()),
        GrpcTransport(url, "m", tls=GrpcTlsSettings()),
    ):
        try:
            with pytest.raises(
                PerfRequestError,
                match=rf"^the TLS handshake with {re.escape(url)} failed \(.+\): is the server "
                "serving TLS on this port\\?$",
            ):
                await transport.connect()
        finally:
            await transport.close()


async def test_open_connection_gives_the_protocol_it_was_asked_for(plain_server: int) -> None:
    made: list[asyncio.Protocol] = []

    def protocol(loop: asyncio.AbstractEventLoop) -> asyncio.Protocol:
        assert loop is asyncio.get_running_loop()
        made.append(asyncio.Protocol())
        return made[-1]

    link, got = await open_connection(
        protocol, "127.0.0.1", plain_server, context=None, tls=None, over="TCP"
    )
    try:
        assert made == [got]
        assert link.get_extra_info("peername")[1] == plain_server
    finally:
        link.close()
