"""A lean HTTP/2 client for gRPC calls, so the load generator costs little per request.

grpcio's asyncio client spends a few hundred microseconds of CPU per call on this machine,
several times what perf_analyzer's C++ client spends; a load generator that heavy takes the
cores the server under test needs. This client does only what a unary call of prepared bytes
needs: a unary request is one ``write`` (a HEADERS frame whose header block is built once, then
one DATA frame holding the gRPC message), and the answer is read frame by frame until its
trailers, whose ``grpc-status`` and ``grpc-message`` decide success or the error raised; its
response message is not even parsed. A bidirectional stream (``ModelStreamInfer``) is one HTTP/2
stream: each request one DATA frame, each response message handed to the stream's reader.

It follows RFC 9113 where a client must: the connection preface and SETTINGS (acknowledged both
ways), PING answered, flow control on what it sends (large requests wait for WINDOW_UPDATE and
are split to the peer's frame size) and on what it receives (large windows, topped up), every
header block decoded in order (HPACK, :mod:`inferd.tools.perf.hpack_decode`), RST_STREAM and
GOAWAY ending the streams they name. A cancelled call resets its stream.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Sequence
from typing import cast
from urllib.parse import unquote

from inferd.tools.perf.hpack_decode import HeaderDecoder, HpackError, literal
from inferd.tools.perf.http_connection import set_nodelay
from inferd.tools.perf.metadata import ACCESS_HINT, is_restricted
from inferd.tools.perf.transport import PerfRequestError

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE = range(9)
CONTINUATION = 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW, SETTINGS_MAX_FRAME = 0x2, 0x4, 0x5
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
CANCEL = 0x8
_HEAD = struct.Struct(">I")  # length (24 bits) + type, packed by hand below
ACCESS_CODES = (7, 16)  # PERMISSION_DENIED, UNAUTHENTICATED
_STATUS_TEXT = {
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    10: "ABORTED",
    11: "OUT_OF_RANGE",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    15: "DATA_LOSS",
    16: "UNAUTHENTICATED",
}


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame."""
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + _HEAD.pack(stream) + payload


def grpc_message(message: bytes) -> bytes:
    """A gRPC length-prefixed message (uncompressed)."""
    return b"\x00" + _HEAD.pack(len(message)) + message


def request_headers(
    authority: str,
    path: str,
    *,
    scheme: str = "http",
    metadata: Sequence[tuple[str, str]] = (),
) -> bytes:
    """The header block of every call to ``path`` (pseudo-headers first), with the call's
    ``metadata`` (lower-case names, printable ASCII values: :mod:`inferd.client.headers`)."""
    fields: Sequence[tuple[str, str]] = (
        (":method", "POST"),
        (":scheme", scheme),
        (":path", path),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *metadata,
    )
    return b"".join(literal(n.encode(), v.encode()) for n, v in fields)


def trailer_error(headers: dict[bytes, bytes]) -> str | None:
    """The error a call's final headers report, or None when ``grpc-status`` is 0."""
    status = headers.get(b"grpc-status")
    if status is None:
        http = headers.get(b":status", b"?").decode()
        return f"the server answered without a gRPC status (HTTP status {http})"
    if status == b"0":
        return None
    message = unquote(headers.get(b"grpc-message", b"").decode("utf-8", "replace"))
    code = int(status) if status.isdigit() else -1
    text = message or f"gRPC status {_STATUS_TEXT.get(code, status.decode())}"
    refused = code in ACCESS_CODES or is_restricted(text)
    return f"{text} ({ACCESS_HINT})" if refused else text


class _Stream:
    __slots__ = ("headers", "on_message", "pending", "received", "send_window", "waiter")

    def __init__(
        self,
        waiter: asyncio.Future[None],
        send_window: int,
        on_message: Callable[[bytes], None] | None = None,
    ) -> None:
        self.waiter = waiter  # done when the stream ends (its trailers, a reset, a lost link)
        self.headers: dict[bytes, bytes] = {}
        self.send_window = send_window
        self.on_message = on_message  # streams read their messages; unary calls do not
        self.pending = bytearray()
        self.received = 0


class Http2Connection(asyncio.Protocol):
    """One HTTP/2 connection carrying gRPC calls and streams (several may be in flight)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._decoder = HeaderDecoder()
        self._streams: dict[int, _Stream] = {}
        self._next_id = 1
        self._block = bytearray()  # a header block awaiting its CONTINUATION frames
        self._block_stream = 0
        self._block_end = False
        self._peer_window = DEFAULT_WINDOW  # the peer's initial stream window
        self._conn_window = DEFAULT_WINDOW  # what the connection may still send
        self._max_frame = 16_384
        self._received = 0  # DATA octets since the last connection WINDOW_UPDATE
        self._window_opened = asyncio.Event()
        self.open = False
        self.closed_reason = ""

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self.open = True
        set_nodelay(transport)
        settings = struct.pack(
            ">HIHI", SETTINGS_ENABLE_PUSH, 0, SETTINGS_INITIAL_WINDOW, MAX_WINDOW
        )
        grow = _HEAD.pack(MAX_WINDOW - DEFAULT_WINDOW)
        self._transport.write(
            PREFACE + frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, grow)
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._close_all("the server closed the connection" + (f" ({exc})" if exc else ""))

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        pos, end = 0, len(buffer)
        try:
            while end - pos >= 9:
                length = int.from_bytes(buffer[pos : pos + 3], "big")
                if end - pos < 9 + length:
                    break
                kind, flags = buffer[pos + 3], buffer[pos + 4]
                stream = _HEAD.unpack_from(buffer, pos + 5)[0] & 0x7FFFFFFF
                self._frame(kind, flags, stream, bytes(buffer[pos + 9 : pos + 9 + length]))
                pos += 9 + length
        except (HpackError, ValueError, struct.error) as exc:
            self._close_all(f"malformed HTTP/2 from the server ({exc})")
            return
        del buffer[:pos]

    # --- frames
    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == DATA:
            self._data(flags, stream, payload)
        elif kind == HEADERS:
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            self._block[:] = payload
            self._block_stream, self._block_end = stream, bool(flags & END_STREAM)
            if flags & END_HEADERS:
                self._headers_done()
        elif kind == CONTINUATION:
            self._block += payload
            if flags & END_HEADERS:
                self._headers_done()
        elif kind == SETTINGS:
            if not flags & ACK:
                self._settings(payload)
        elif kind == PING:
            if not flags & ACK:
                self._write(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            self._window_update(stream, _HEAD.unpack(payload)[0] & 0x7FFFFFFF)
        elif kind == RST_STREAM:
            code = _HEAD.unpack(payload)[0]
            self._finish(stream, f"the server reset the stream (HTTP/2 error {code})")
        elif kind == GOAWAY:
            last = _HEAD.unpack_from(payload)[0] & 0x7FFFFFFF
            self.open = False
            self.closed_reason = "the server is going away (GOAWAY)"
            for sid in [s for s in self._streams if s > last]:
                self._finish(sid, self.closed_reason)
        # PRIORITY, PUSH_PROMISE (refused by SETTINGS) and unknown frames are ignored

    def _settings(self, payload: bytes) -> None:
        for pos in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, pos)
            if key == SETTINGS_INITIAL_WINDOW:
                for entry in self._streams.values():
                    entry.send_window += value - self._peer_window
                self._peer_window = value
                self._window_opened.set()
            elif key == SETTINGS_MAX_FRAME:
                self._max_frame = value
        self._write(frame(SETTINGS, ACK, 0))

    def _window_update(self, stream: int, increment: int) -> None:
        if stream == 0:
            self._conn_window += increment
        elif stream in self._streams:
            self._streams[stream].send_window += increment
        self._window_opened.set()

    def _data(self, flags: int, stream: int, payload: bytes) -> None:
        self._received += len(payload)
        if self._received > MAX_WINDOW // 2:  # keep the connection window open
            self._write(frame(WINDOW_UPDATE, 0, 0, _HEAD.pack(self._received)))
            self._received = 0
        entry = self._streams.get(stream)
        if entry is not None and entry.on_message is not None:
            entry.received += len(payload)
            if entry.received > MAX_WINDOW // 2:  # and a long stream's own window
                self._write(frame(WINDOW_UPDATE, 0, stream, _HEAD.pack(entry.received)))
                entry.received = 0
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            self._messages(entry, payload)
        if flags & END_STREAM:
            self._finish(stream, "the server ended the call without a gRPC status")

    def _messages(self, entry: _Stream, payload: bytes) -> None:
        """Hand each complete gRPC message of a stream to its reader."""
        pending = entry.pending
        pending += payload
        pos, end = 0, len(pending)
        while end - pos >= 5:
            size = _HEAD.unpack_from(pending, pos + 1)[0]
            if end - pos - 5 < size:
                break
            if pending[pos]:
                raise ValueError("a compressed gRPC message, which was not asked for")
            assert entry.on_message is not None
            entry.on_message(bytes(pending[pos + 5 : pos + 5 + size]))
            pos += 5 + size
        del pending[:pos]

    def _headers_done(self) -> None:
        headers = self._decoder.decode(bytes(self._block))  # always: keeps the table in step
        entry = self._streams.get(self._block_stream)
        if entry is None:
            return
        entry.headers.update(headers)
        if self._block_end:
            self._finish(self._block_stream, trailer_error(entry.headers))

    def _finish(self, stream: int, error: str | None) -> None:
        entry = self._streams.pop(stream, None)
        if entry is None or entry.waiter.done():
            return
        if error is None:
            entry.waiter.set_result(None)
        else:
            entry.waiter.set_exception(PerfRequestError(error))

    def _close_all(self, reason: str) -> None:
        self.open = False
        self.closed_reason = self.closed_reason or reason
        for stream in list(self._streams):
            self._finish(stream, self.closed_reason)
        if self._transport is not None:
            self._transport.close()

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    # --- calls
    def _new_stream(self, on_message: Callable[[bytes], None] | None) -> tuple[int, _Stream]:
        if not self.open or self._next_id > MAX_WINDOW:
            raise PerfRequestError(self.closed_reason or "the HTTP/2 connection is closed")
        stream = self._next_id
        self._next_id += 2
        entry = _Stream(self._loop.create_future(), self._peer_window, on_message)
        self._streams[stream] = entry
        return stream, entry

    async def call(self, header_block: bytes, message: bytes) -> None:
        """One unary call: ``message`` is the gRPC-framed request (:func:`grpc_message`)."""
        stream, entry = self._new_stream(None)
        head = frame(HEADERS, END_HEADERS, stream, header_block)
        size = len(message)
        try:
            if size <= min(self._max_frame, self._conn_window, entry.send_window):
                self._conn_window -= size
                entry.send_window -= size
                self._write(head + frame(DATA, END_STREAM, stream, message))
            else:
                self._write(head)
                await self._send_data(stream, entry, message, end=True)
            await entry.waiter
        except asyncio.CancelledError:
            self.reset(stream)
            raise

    def open_stream(
        self, header_block: bytes, on_message: Callable[[bytes], None]
    ) -> tuple[int, asyncio.Future[None]]:
        """Start a streaming call; ``on_message`` gets each response message. Returns the
        stream's id and a future done when the server ends it (an error unless status 0)."""
        stream, entry = self._new_stream(on_message)
        self._write(frame(HEADERS, END_HEADERS, stream, header_block))
        return stream, entry.waiter

    async def send(self, stream: int, message: bytes) -> None:
        """One gRPC-framed message on an open stream."""
        entry = self._streams.get(stream)
        if entry is None:
            raise PerfRequestError(self.closed_reason or "the stream has ended")
        size = len(message)
        if size <= min(self._max_frame, self._conn_window, entry.send_window):
            self._conn_window -= size
            entry.send_window -= size
            self._write(frame(DATA, 0, stream, message))
        else:
            await self._send_data(stream, entry, message, end=False)

    def reset(self, stream: int) -> None:
        """Abandon a stream (RST_STREAM CANCEL); whatever it still brings is ignored."""
        entry = self._streams.pop(stream, None)
        if entry is not None:
            self._write(frame(RST_STREAM, 0, stream, _HEAD.pack(CANCEL)))
            if not entry.waiter.done():
                entry.waiter.cancel()

    async def _send_data(self, stream: int, entry: _Stream, message: bytes, *, end: bool) -> None:
        view = memoryview(message)
        while view:
            room = min(self._max_frame, self._conn_window, entry.send_window, len(view))
            if room <= 0:
                self._window_opened.clear()
                await self._window_opened.wait()
                if not self.open or entry.waiter.done():
                    return
                continue
            last = room == len(view)
            self._conn_window -= room
            entry.send_window -= room
            self._write(frame(DATA, END_STREAM if last and end else 0, stream, bytes(view[:room])))
            view = view[room:]

    def close(self) -> None:
        self._close_all("the connection was closed")
