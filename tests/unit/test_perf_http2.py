"""The load generator's HTTP/2 connection driven by a server side built with h2 too: the
server's bytes fed in, the client's written bytes read back (no sockets: every path a real
server rarely takes), and the pure pieces (gRPC framing, headers, trailers)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    PingAckReceived,
    RequestReceived,
    SettingsAcknowledged,
    StreamEnded,
    StreamReset,
)
from h2.settings import SettingCodes
from hyperframe.frame import Frame, RstStreamFrame
from hypothesis import given
from hypothesis import strategies as st

from inferd.tools.perf.grpc_h2 import (
    Http2Connection,
    grpc_message,
    request_headers,
    split_messages,
    trailer_error,
)
from inferd.tools.perf.transport import PerfRequestError

HEADERS = request_headers("127.0.0.1:8001", "/inference.GRPCInferenceService/ModelInfer")
RESPONSE_HEAD = [(b":status", b"200"), (b"content-type", b"application/grpc")]


class Wire:
    """Stands for the socket: collects what the client writes."""

    def __init__(self) -> None:
        self.sent = bytearray()
        self.writes = 0
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sent += data
        self.writes += 1

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return None


class Server:
    """The server's end of the connection (h2, server side)."""

    def __init__(self, conn: Http2Connection, wire: Wire) -> None:
        self.h2 = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        self.h2.initiate_connection()
        self.conn, self.wire = conn, wire
        self.events: list[Event] = []
        self.body: dict[int, bytes] = {}

    def read(self) -> list[Event]:
        """Take what the client wrote since the last read."""
        events = self.h2.receive_data(bytes(self.wire.sent))
        self.wire.sent.clear()
        for event in events:
            if isinstance(event, DataReceived):
                self.body[event.stream_id] = self.body.get(event.stream_id, b"") + event.data
        self.events += events
        return events

    def pending(self) -> bytes:
        return self.h2.data_to_send()

    def answer(self, stream: int, body: bytes, status: str = "0", message: str = "") -> bytes:
        """The bytes of a whole reply: headers, ``body`` as one DATA frame, trailers."""
        self.h2.send_headers(stream, RESPONSE_HEAD)
        if body:
            self.h2.send_data(stream, body)
        self.h2.send_headers(stream, trailers(status, message), end_stream=True)
        return self.pending()

    def flush(self) -> None:
        """Hand everything the server has queued to the client."""
        self.conn.data_received(self.pending())


def frames(wire: Wire) -> list[Frame]:
    """The frames the client wrote since the server last read (the wire is left as it was)."""
    data, out = bytes(wire.sent), []
    while data:
        frame, length = Frame.parse_frame_header(memoryview(data[:9]))
        frame.parse_body(memoryview(data[9 : 9 + length]))
        out.append(frame)
        data = data[9 + length :]
    return out


def trailers(status: str, message: str = "") -> list[tuple[bytes, bytes]]:
    fields = [(b"grpc-status", status.encode())]
    if message:
        fields.append((b"grpc-message", message.encode()))
    return fields


def connect() -> tuple[Http2Connection, Wire, Server]:
    conn = Http2Connection(asyncio.get_running_loop())
    wire = Wire()
    conn.connection_made(wire)  # type: ignore[arg-type]
    server = Server(conn, wire)
    server.read()  # the client's preface and settings
    server.flush()  # the server's settings (and the ack of the client's)
    return conn, wire, server


async def test_a_unary_call_is_one_write_and_ends_at_its_trailers_in_any_chunking() -> None:
    conn, wire, server = connect()
    writes = wire.writes
    call = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"req")))
    await asyncio.sleep(0)
    assert wire.writes == writes + 1  # HEADERS and DATA in one write
    request = next(e for e in server.read() if isinstance(e, RequestReceived))
    assert request.headers is not None
    assert (b":path", b"/inference.GRPCInferenceService/ModelInfer") in request.headers
    assert (b"te", b"trailers") in request.headers
    assert server.body[1] == grpc_message(b"req")
    assert any(isinstance(e, StreamEnded) for e in server.events)
    reply = server.answer(1, grpc_message(b"x" * 40))
    for i in range(0, len(reply), 7):  # the server's bytes arrive in small pieces
        assert not call.done()
        conn.data_received(reply[i : i + 7])
    await call
    second = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"again")))
    await asyncio.sleep(0)
    server.read()
    assert server.body[3] == grpc_message(b"again")  # the next call, the next stream
    conn.data_received(server.answer(3, b""))
    await second


async def test_error_trailers_raise_the_servers_message() -> None:
    conn, _, server = connect()
    call = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"")))
    await asyncio.sleep(0)
    server.read()
    # a trailers-only answer: status and trailers in one HEADERS frame
    fields = RESPONSE_HEAD + trailers("3", "wrong%20shape%3A%2015")
    server.h2.send_headers(1, fields, end_stream=True)
    server.flush()
    with pytest.raises(PerfRequestError, match="wrong shape: 15"):
        await call
    call = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"")))
    await asyncio.sleep(0)
    server.read()
    server.h2.send_headers(3, [(b":status", b"503")], end_stream=True)
    server.flush()
    with pytest.raises(PerfRequestError, match="without a gRPC status"):
        await call


async def test_settings_and_pings_are_answered() -> None:
    _, _, server = connect()
    server.read()
    assert any(isinstance(e, SettingsAcknowledged) for e in server.events)  # the first ones
    server.events.clear()
    server.h2.update_settings({SettingCodes.MAX_FRAME_SIZE: 32768})
    server.h2.ping(b"12345678")
    server.flush()
    events = server.read()
    assert any(isinstance(e, SettingsAcknowledged) for e in events)
    pongs = [e for e in events if isinstance(e, PingAckReceived)]
    assert [p.ping_data for p in pongs] == [b"12345678"]


async def test_requests_larger_than_the_window_are_split_and_wait() -> None:
    conn, _, server = connect()
    message = grpc_message(bytes(100_000))  # above the server's 65,535-octet window
    call = asyncio.ensure_future(conn.call(HEADERS, message))
    await asyncio.sleep(0)
    events = server.read()
    data = [e for e in events if isinstance(e, DataReceived)]
    assert sum(len(e.data) for e in data) == 65_535
    assert all(len(e.data) <= 16_384 for e in data)
    assert not any(isinstance(e, StreamEnded) for e in events)
    server.h2.increment_flow_control_window(50_000)
    server.h2.increment_flow_control_window(50_000, stream_id=1)
    server.flush()
    await asyncio.sleep(0)
    events = server.read()
    assert server.body[1] == message
    assert any(isinstance(e, StreamEnded) for e in events)
    conn.data_received(server.answer(1, b""))
    await call


async def test_a_request_waiting_for_room_fails_when_the_connection_is_lost() -> None:
    conn, _, _ = connect()
    call = asyncio.ensure_future(conn.call(HEADERS, grpc_message(bytes(100_000))))
    await asyncio.sleep(0)
    conn.connection_lost(ConnectionResetError("reset by peer"))
    with pytest.raises(PerfRequestError, match=r"closed the connection \(reset by peer\)"):
        await call


async def test_resets_goaway_and_lost_connections_end_calls() -> None:
    conn, wire, server = connect()
    first = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"")))
    second = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"")))
    third = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"")))
    await asyncio.sleep(0)
    server.read()
    server.h2.reset_stream(1, ErrorCodes.INTERNAL_ERROR)
    server.flush()
    with pytest.raises(PerfRequestError, match=r"reset the stream \(HTTP/2 error INTERNAL_ERROR\)"):
        await first
    assert not second.done()
    server.h2.close_connection(last_stream_id=3)
    server.flush()
    for call in (second, third):  # h2 takes no frames after GOAWAY: every call ends
        with pytest.raises(PerfRequestError, match="GOAWAY"):
            await call
    assert not conn.open
    assert wire.closed
    with pytest.raises(PerfRequestError, match="GOAWAY"):
        await conn.call(HEADERS, grpc_message(b""))

    conn, _, server = connect()
    call = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"")))
    await asyncio.sleep(0)
    conn.connection_lost(None)
    with pytest.raises(PerfRequestError, match="the server closed the connection"):
        await call
    assert not conn.open


async def test_malformed_bytes_end_the_connection() -> None:
    conn, wire, _ = connect()
    call = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"")))
    await asyncio.sleep(0)
    conn.data_received(b"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00")  # window += 0
    with pytest.raises(PerfRequestError, match="malformed HTTP/2"):
        await call
    assert wire.closed


async def test_a_cancelled_call_resets_its_stream_and_the_late_answer_is_dropped() -> None:
    conn, wire, server = connect()
    call = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"")))
    await asyncio.sleep(0)
    server.read()
    late = server.answer(1, grpc_message(b"late"))  # sent before the server sees the reset
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert [(f.stream_id, f.error_code) for f in frames(wire) if isinstance(f, RstStreamFrame)] == [
        (1, ErrorCodes.CANCEL)
    ]
    server.read()
    conn.data_received(late)  # dropped quietly
    assert conn.open
    following = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"")))
    await asyncio.sleep(0)
    server.read()
    conn.data_received(server.answer(3, b""))
    await following
    assert not any(isinstance(e, ConnectionTerminated) for e in server.events)


async def test_a_stream_cancelled_before_its_answer_is_reset_on_the_server() -> None:
    conn, _, server = connect()
    call = asyncio.ensure_future(conn.call(HEADERS, grpc_message(b"")))
    await asyncio.sleep(0)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    resets = [e for e in server.read() if isinstance(e, StreamReset)]
    assert [(r.stream_id, r.error_code, r.remote_reset) for r in resets] == [
        (1, ErrorCodes.CANCEL, True)
    ]


async def test_stream_messages_are_reassembled_across_frames() -> None:
    conn, _, server = connect()
    got: list[bytes] = []
    stream, ended = conn.open_stream(HEADERS, got.append)
    await conn.send(stream, grpc_message(b"one"))
    await conn.send(stream, grpc_message(b"two"))
    server.read()
    assert server.body[stream] == grpc_message(b"one") + grpc_message(b"two")
    body = grpc_message(b"first") + grpc_message(b"") + grpc_message(b"third" * 10)
    server.h2.send_headers(stream, RESPONSE_HEAD)
    server.h2.send_data(stream, body[:8])
    server.flush()
    assert got == []
    server.h2.send_data(stream, body[8:])
    server.flush()
    assert got == [b"first", b"", b"third" * 10]
    server.h2.send_headers(stream, trailers("13", "boom"), end_stream=True)
    server.flush()
    with pytest.raises(PerfRequestError, match="boom"):
        await ended
    with pytest.raises(PerfRequestError, match="ended"):
        await conn.send(stream, grpc_message(b"three"))


@given(
    st.lists(st.binary(max_size=40), max_size=6),
    st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=8),
)
def test_split_messages_in_any_chunking(messages: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(grpc_message(m) for m in messages)
    pending, got = bytearray(), []
    pos, i = 0, 0
    while pos < len(wire):
        step = cuts[i % len(cuts)]
        pending += wire[pos : pos + step]
        split_messages(pending, got.append)
        pos, i = pos + step, i + 1
    assert got == messages
    assert not pending


def test_a_compressed_message_is_refused() -> None:
    with pytest.raises(ValueError, match="compressed"):
        split_messages(bytearray(b"\x01\x00\x00\x00\x00"), print)


def test_grpc_framing_and_headers() -> None:
    assert grpc_message(b"xyz") == b"\x00\x00\x00\x00\x03xyz"
    fields = request_headers("h:1", "/svc/M")
    assert fields[:4] == [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/svc/M"),
        (b":authority", b"h:1"),
    ]
    assert (b"te", b"trailers") in fields


def test_trailers() -> None:
    assert trailer_error({b"grpc-status": b"0"}) is None
    assert trailer_error({b"grpc-status": b"3", b"grpc-message": b"bad%20shape"}) == "bad shape"
    assert trailer_error({b"grpc-status": b"13"}) == "gRPC status INTERNAL"
    assert trailer_error({b"grpc-status": b"99"}) == "gRPC status 99"
    assert "HTTP status 503" in str(trailer_error({b":status": b"503"}))
