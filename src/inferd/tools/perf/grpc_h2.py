"""gRPC calls over HTTP/2 with python-hyper's ``h2``, so the load generator costs little per call.

grpcio's asyncio client spends a few hundred microseconds of CPU per call on this machine,
several times what perf_analyzer's C++ client spends; a load generator that heavy takes the
cores the server under test needs. This client does only what a call of prepared bytes needs,
and leaves HTTP/2 itself (frames, HPACK, SETTINGS, PING, flow control, stream states) to
``h2.connection.H2Connection``: this module owns the asyncio protocol and reacts to h2's events.

A unary call is one ``write``: its header list is built once per transport and its gRPC message
once per prepared request; ``send_headers`` and ``send_data`` queue both frames and one
``data_to_send`` hands them to the socket. The answer ends at its trailers, whose
``grpc-status`` and ``grpc-message`` decide success or the error raised; its response message
is not even parsed. A bidirectional stream (``ModelStreamInfer``) is one HTTP/2 stream: each
request one DATA frame, each response message handed to the stream's reader.

Flow control: received data is acknowledged as it is read (the windows are opened wide at the
start); a request larger than what the server lets through waits for ``WindowUpdated`` and is
split to the server's frame size. RST_STREAM ends its stream; GOAWAY ends the connection and
every call on it (h2 takes no frames after GOAWAY, so calls the server would still have
finished end too; the next call opens a new connection). A cancelled call resets its stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import cast
from urllib.parse import unquote

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RemoteSettingsChanged,
    ResponseReceived,
    StreamEnded,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)
from h2.exceptions import H2Error
from h2.settings import SettingCodes, Settings

from inferd.tools.perf.transport import PerfRequestError

Headers = list[tuple[bytes, bytes]]
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
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


def grpc_message(message: bytes) -> bytes:
    """A gRPC length-prefixed message (uncompressed)."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


def request_headers(authority: str, path: str) -> Headers:
    """The headers of every call to ``path`` (pseudo-headers first)."""
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", authority.encode()),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]


def trailer_error(headers: dict[bytes, bytes]) -> str | None:
    """The error a call's final headers report, or None when ``grpc-status`` is 0."""
    status = headers.get(b"grpc-status")
    if status is None:
        http = headers.get(b":status", b"?").decode()
        return f"the server answered without a gRPC status (HTTP status {http})"
    if status == b"0":
        return None
    message = unquote(headers.get(b"grpc-message", b"").decode("utf-8", "replace"))
    if message:
        return message
    code = int(status) if status.isdigit() else -1
    return f"gRPC status {_STATUS_TEXT.get(code, status.decode())}"


def split_messages(pending: bytearray, on_message: Callable[[bytes], None]) -> None:
    """Hand each complete gRPC message at the front of ``pending`` to ``on_message`` and remove
    it; an incomplete one stays for the next DATA frame."""
    pos, end = 0, len(pending)
    while end - pos >= 5:
        size = int.from_bytes(pending[pos + 1 : pos + 5], "big")
        if end - pos - 5 < size:
            break
        if pending[pos]:
            raise ValueError("a compressed gRPC message, which was not asked for")
        on_message(bytes(pending[pos + 5 : pos + 5 + size]))
        pos += 5 + size
    del pending[:pos]


def _code_name(code: ErrorCodes | int | None) -> str:
    return code.name if isinstance(code, ErrorCodes) else str(code)


class _Stream:
    __slots__ = ("headers", "on_message", "pending", "waiter")

    def __init__(
        self, waiter: asyncio.Future[None], on_message: Callable[[bytes], None] | None = None
    ) -> None:
        self.waiter = waiter  # done when the stream ends (its trailers, a reset, a lost link)
        self.headers: dict[bytes, bytes] = {}
        self.on_message = on_message  # streams read their messages; unary calls do not
        self.pending = bytearray()


class Http2Connection(asyncio.Protocol):
    """One HTTP/2 connection carrying gRPC calls and streams (several may be in flight)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        config = H2Configuration(client_side=True, header_encoding=None)
        self._h2 = H2Connection(config=config)
        self._streams: dict[int, _Stream] = {}
        self._window_opened = asyncio.Event()
        self.open = False
        self.closed_reason = ""

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self.open = True
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        h2 = self._h2
        h2.local_settings = Settings(
            client=True,
            initial_values={
                SettingCodes.ENABLE_PUSH: 0,
                SettingCodes.INITIAL_WINDOW_SIZE: MAX_WINDOW,
            },
        )
        h2.initiate_connection()
        h2.increment_flow_control_window(MAX_WINDOW - DEFAULT_WINDOW)
        self._transport.write(h2.data_to_send())

    def connection_lost(self, exc: Exception | None) -> None:
        self._close_all("the server closed the connection" + (f" ({exc})" if exc else ""))

    def data_received(self, data: bytes) -> None:
        h2 = self._h2
        try:
            for event in h2.receive_data(data):
                if isinstance(event, DataReceived):
                    self._data(event)
                elif isinstance(event, (ResponseReceived, TrailersReceived)):
                    entry = self._streams.get(event.stream_id)
                    if entry is not None:
                        entry.headers.update(event.headers)
                elif isinstance(event, StreamEnded):
                    entry = self._streams.get(event.stream_id)
                    if entry is not None:
                        self._finish(event.stream_id, trailer_error(entry.headers))
                elif isinstance(event, (WindowUpdated, RemoteSettingsChanged)):
                    self._window_opened.set()
                elif isinstance(event, StreamReset):
                    code = _code_name(event.error_code)
                    self._finish(
                        event.stream_id,
                        f"the server reset the stream (HTTP/2 error {code})",
                    )
                elif isinstance(event, ConnectionTerminated):
                    code = _code_name(event.error_code)
                    self._close_all(f"the server is going away (GOAWAY, HTTP/2 error {code})")
                    return
                # pings and settings are answered by h2 itself; other events need nothing
        except (H2Error, ValueError) as exc:
            self._close_all(f"malformed HTTP/2 from the server ({exc})")
            return
        self._flush()

    # --- events
    def _data(self, event: DataReceived) -> None:
        stream = event.stream_id
        self._h2.acknowledge_received_data(event.flow_controlled_length, stream)
        entry = self._streams.get(stream)
        if entry is not None and entry.on_message is not None:
            entry.pending += event.data
            split_messages(entry.pending, entry.on_message)

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
        self._window_opened.set()  # a request waiting for room learns the connection is gone
        if self._transport is not None:
            self._transport.close()

    def _flush(self) -> None:
        out = self._h2.data_to_send()
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(out)

    # --- calls
    def _new_stream(self, on_message: Callable[[bytes], None] | None) -> tuple[int, _Stream]:
        if not self.open:
            raise PerfRequestError(self.closed_reason or "the HTTP/2 connection is closed")
        try:
            stream = self._h2.get_next_available_stream_id()
        except H2Error as exc:
            raise PerfRequestError(f"no new stream on this HTTP/2 connection ({exc})") from None
        entry = _Stream(self._loop.create_future(), on_message)
        self._streams[stream] = entry
        return stream, entry

    async def call(self, headers: Headers, message: bytes) -> None:
        """One unary call: ``message`` is the gRPC-framed request (:func:`grpc_message`)."""
        stream, entry = self._new_stream(None)
        h2 = self._h2
        try:
            h2.send_headers(stream, headers)
            if len(message) <= min(
                h2.local_flow_control_window(stream), h2.max_outbound_frame_size
            ):
                h2.send_data(stream, message, end_stream=True)
                self._flush()
            else:
                self._flush()
                await self._send_data(stream, entry, message, end=True)
            await entry.waiter
        except asyncio.CancelledError:
            self.reset(stream)
            raise
        except H2Error as exc:
            self._streams.pop(stream, None)
            raise PerfRequestError(f"the call could not be sent ({exc})") from None

    def open_stream(
        self, headers: Headers, on_message: Callable[[bytes], None]
    ) -> tuple[int, asyncio.Future[None]]:
        """Start a streaming call; ``on_message`` gets each response message. Returns the
        stream's id and a future done when the server ends it (an error unless status 0)."""
        stream, entry = self._new_stream(on_message)
        try:
            self._h2.send_headers(stream, headers)
        except H2Error as exc:
            self._streams.pop(stream, None)
            raise PerfRequestError(f"the stream could not be opened ({exc})") from None
        self._flush()
        return stream, entry.waiter

    async def send(self, stream: int, message: bytes) -> None:
        """One gRPC-framed message on an open stream."""
        entry = self._streams.get(stream)
        if entry is None:
            raise PerfRequestError(self.closed_reason or "the stream has ended")
        h2 = self._h2
        try:
            if len(message) <= min(
                h2.local_flow_control_window(stream), h2.max_outbound_frame_size
            ):
                h2.send_data(stream, message)
                self._flush()
            else:
                await self._send_data(stream, entry, message, end=False)
        except H2Error as exc:
            raise PerfRequestError(f"the stream could not carry the request ({exc})") from None

    def reset(self, stream: int) -> None:
        """Abandon a stream (RST_STREAM CANCEL); whatever it still brings is ignored."""
        entry = self._streams.pop(stream, None)
        if entry is None:
            return
        with contextlib.suppress(H2Error):  # the connection may be gone already
            self._h2.reset_stream(stream, ErrorCodes.CANCEL)
            self._flush()
        if not entry.waiter.done():
            entry.waiter.cancel()

    def _room(self, stream: int) -> int:
        """What one DATA frame on ``stream`` may carry now."""
        return min(self._h2.local_flow_control_window(stream), self._h2.max_outbound_frame_size)

    async def _send_data(self, stream: int, entry: _Stream, message: bytes, *, end: bool) -> None:
        """Send ``message`` as the windows let it through, frame by frame."""
        h2 = self._h2
        view = memoryview(message)
        while view:
            if not self.open or entry.waiter.done():
                return  # the stream ended meanwhile: its waiter says how
            room = min(self._room(stream), len(view))
            if room <= 0:
                self._window_opened.clear()
                await self._window_opened.wait()
                continue
            last = room == len(view)
            h2.send_data(stream, bytes(view[:room]), end_stream=last and end)
            self._flush()
            view = view[room:]

    def close(self) -> None:
        self._close_all("the connection was closed")
