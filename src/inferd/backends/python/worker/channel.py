"""The worker's end of its socket, shared by every thread of the model (worker process side).

The main thread waits for the next ``execute``; a decoupled model's own threads send responses;
a model calling other models (business-logic scripting) waits for their answers. There is no
reader thread: whichever thread is waiting reads the socket for everyone (one at a time) and
routes each message to whoever it is for, so the plain execute path costs no thread hand-off.

Routing: ``execute`` / ``finalize`` -> the main queue; ``arena`` / ``abort`` / ``room`` -> the
writer's replies; ``bls`` -> the call it answers (by ``call`` number); ``cancel`` -> the set of
cancelled requests of the current batch.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection

from inferd.backends.python.protocol import Message, decode, encode

_MAIN = frozenset({"execute", "finalize"})
_REPLIES = frozenset({"arena", "abort", "room"})


class ChannelClosed(EOFError):
    """The server went away."""


class Channel:
    """Send from any thread; wait for a message from any thread (see the module doc)."""

    def __init__(self, conn: Connection, prepare: Callable[[Message], Message] | None = None):
        self._conn = conn
        self._prepare = prepare  # runs on a ``bls`` message before it is routed (reads tensors)
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._reading = False
        self._closed = False
        self._main: deque[Message] = deque()
        self._replies: deque[Message] = deque()
        self._calls: dict[int, deque[Message]] = {}
        self.cancelled: set[int] = set()  # request indexes of the current batch

    def send(self, message: Message) -> None:
        data = encode(message)
        with self._send_lock:
            self._conn.send_bytes(data)

    # -- waiting -----------------------------------------------------------------------------

    def next_main(self) -> Message:
        """The next ``execute`` or ``finalize`` (blocking)."""
        self._pump(lambda: bool(self._main))
        return self._main.popleft()

    def next_reply(self) -> Message:
        """The server's answer to ``grow`` or ``room`` (blocking)."""
        self._pump(lambda: bool(self._replies))
        return self._replies.popleft()

    def open_call(self, call: int) -> None:
        with self._cond:
            self._calls[call] = deque()

    def next_for_call(self, call: int) -> Message:
        """The next message answering business-logic call ``call`` (blocking)."""
        box = self._calls[call]
        self._pump(lambda: bool(box))
        return box.popleft()

    def close_call(self, call: int) -> None:
        with self._cond:
            self._calls.pop(call, None)

    def poll(self) -> None:
        """Route whatever has arrived, without waiting (unless another thread is reading: it
        routes for everyone)."""
        with self._cond:
            if self._reading or self._closed:
                return
            self._reading = True
        try:
            while self._conn.poll(0):
                self._read_one()
        except (EOFError, OSError):
            self._mark_closed()
        finally:
            self._stop_reading()

    def _pump(self, ready: Callable[[], bool]) -> None:
        with self._cond:
            while True:
                if ready():
                    return
                if self._closed:
                    raise ChannelClosed("the server closed the connection")
                if not self._reading:
                    self._reading = True
                    break
                self._cond.wait()
        try:
            while True:
                try:
                    self._read_one()
                except (EOFError, OSError):
                    self._mark_closed()
                    raise ChannelClosed("the server closed the connection") from None
                with self._cond:
                    if ready():
                        return
        finally:
            self._stop_reading()

    def _read_one(self) -> None:
        message = decode(self._conn.recv_bytes())
        op = message["op"]
        if op == "bls" and self._prepare is not None:
            message = self._prepare(message)
        with self._cond:
            if op in _MAIN:
                self._main.append(message)
            elif op in _REPLIES:
                self._replies.append(message)
            elif op == "bls":
                box = self._calls.get(int(message["call"]))
                if box is not None:  # a call nobody waits for any more: dropped
                    box.append(message)
            elif op == "cancel":
                self.cancelled.add(int(message["index"]))
            self._cond.notify_all()

    def _stop_reading(self) -> None:
        with self._cond:
            self._reading = False
            self._cond.notify_all()

    def _mark_closed(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
