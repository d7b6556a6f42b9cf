"""The load generator's HTTP/2 connection as a state machine: the server's frames fed in as bytes,
the client's written frames read back (no sockets: every path a real server rarely takes)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from inferd.tools.perf import grpc_h2
from inferd.tools.perf.grpc_h2 import (
    ACK,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PING,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    Http2Connection,
    frame,
    grpc_message,
)
from inferd.tools.perf.hpack_decode import literal
from inferd.tools.perf.transport import PerfRequestError


class Wire:
    """Collects what the connection writes."""

    def __init__(self) -> None:
        self.sent = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sent += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return None

    def frames(self) -> list[tuple[int, int, int, bytes]]:
        data = bytes(self.sent)
        assert data.startswith(grpc_h2.PREFACE)
        pos, out = len(grpc_h2.PREFACE), []
        while pos < len(data):
            length = int.from_bytes(data[pos : pos + 3], "big")
            stream = struct.unpack_from(">I", data, pos + 5)[0]
            out.append((data[pos + 3], data[pos + 4], stream, data[pos + 9 : pos + 9 + length]))
            pos += 9 + length
        return out


def connect() -> tuple[Http2Connection, Wire]:
    conn = Http2Connection(asyncio.get_running_loop())
    wire = Wire()
    conn.connection_made(wire)  # type: ignore[arg-type]
    return conn, wire


def trailers(stream: int, status: str, message: str = "") -> bytes:
    block = literal(b"grpc-status", status.encode())
    if message:
        block += literal(b"grpc-message", message.encode())
    return frame(HEADERS, END_HEADERS | END_STREAM, stream, block)


RESPONSE_HEAD = literal(b":status", b"200") + literal(b"content-type", b"application/grpc")


async def test_a_unary_call_ends_at_its_trailers_in_any_chunking() -> None:
    conn, wire = connect()
    call = asyncio.ensure_future(conn.call(b"HB", grpc_message(b"req")))
    await asyncio.sleep(0)
    sent = wire.frames()
    assert [f[0] for f in sent] == [SETTINGS, WINDOW_UPDATE, HEADERS, DATA]
    assert sent[3][1] == END_STREAM
    assert sent[3][3] == grpc_message(b"req")
    reply = (
        frame(HEADERS, END_HEADERS, 1, RESPONSE_HEAD)
        + frame(DATA, 0, 1, grpc_message(b"x" * 40))
        + trailers(1, "0")
    )
    for i in range(0, len(reply), 7):  # the server's bytes arrive in small pieces
        assert not call.done()
        conn.data_received(reply[i : i + 7])
    await call


async def test_error_trailers_raise_the_servers_message() -> None:
    conn, _ = connect()
    call = asyncio.ensure_future(conn.call(b"HB", grpc_message(b"")))
    await asyncio.sleep(0)
    conn.data_received(trailers(1, "3", "wrong%20shape%3A%2015"))
    with pytest.raises(PerfRequestError, match="wrong shape: 15"):
        await call


async def test_settings_and_pings_are_answered() -> None:
    conn, wire = connect()
    conn.data_received(frame(SETTINGS, 0, 0, struct.pack(">HI", 5, 32768)))
    conn.data_received(frame(PING, 0, 0, b"12345678"))
    answers = wire.frames()[2:]
    assert answers == [(SETTINGS, ACK, 0, b""), (PING, ACK, 0, b"12345678")]


async def test_flow_control_splits_and_waits() -> None:
    conn, wire = connect()
    message = grpc_message(bytes(100_000))  # above the peer's 65,535-octet window
    call = asyncio.ensure_future(conn.call(b"HB", message))
    await asyncio.sleep(0)
    data = [f for f in wire.frames() if f[0] == DATA]
    assert sum(len(f[3]) for f in data) == 65_535
    assert all(len(f[3]) <= 16_384 for f in data)
    assert not any(f[1] & END_STREAM for f in data)
    conn.data_received(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 50_000)))
    conn.data_received(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 50_000)))
    await asyncio.sleep(0)
    data = [f for f in wire.frames() if f[0] == DATA]
    assert b"".join(f[3] for f in data) == message
    assert data[-1][1] == END_STREAM
    conn.data_received(trailers(1, "0"))
    await call


async def test_resets_goaway_and_lost_connections_end_calls() -> None:
    conn, _ = connect()
    first = asyncio.ensure_future(conn.call(b"HB", grpc_message(b"")))
    second = asyncio.ensure_future(conn.call(b"HB", grpc_message(b"")))
    third = asyncio.ensure_future(conn.call(b"HB", grpc_message(b"")))
    await asyncio.sleep(0)
    conn.data_received(frame(RST_STREAM, 0, 1, struct.pack(">I", 2)))
    with pytest.raises(PerfRequestError, match="reset the stream"):
        await first
    conn.data_received(frame(GOAWAY, 0, 0, struct.pack(">II", 3, 0)))
    with pytest.raises(PerfRequestError, match="GOAWAY"):
        await third  # stream 5, above the last one the server will finish
    assert not conn.open
    with pytest.raises(PerfRequestError, match="GOAWAY"):
        await conn.call(b"HB", grpc_message(b""))
    conn.connection_lost(None)
    with pytest.raises(PerfRequestError):
        await second


async def test_a_cancelled_call_resets_its_stream() -> None:
    conn, wire = connect()
    call = asyncio.ensure_future(conn.call(b"HB", grpc_message(b"")))
    await asyncio.sleep(0)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert wire.frames()[-1][:3] == (RST_STREAM, 0, 1)
    conn.data_received(trailers(1, "0"))  # a late answer is dropped quietly


async def test_stream_messages_are_reassembled_across_frames() -> None:
    conn, _ = connect()
    got: list[bytes] = []
    stream, ended = conn.open_stream(b"HB", got.append)
    await conn.send(stream, grpc_message(b"one"))
    body = grpc_message(b"first") + grpc_message(b"") + grpc_message(b"third" * 10)
    conn.data_received(frame(HEADERS, END_HEADERS, stream, RESPONSE_HEAD))
    conn.data_received(frame(DATA, 0, stream, body[:8]))
    assert got == []
    conn.data_received(frame(DATA, 0, stream, body[8:]))
    assert got == [b"first", b"", b"third" * 10]
    conn.data_received(trailers(stream, "13", "boom"))
    with pytest.raises(PerfRequestError, match="boom"):
        await ended
