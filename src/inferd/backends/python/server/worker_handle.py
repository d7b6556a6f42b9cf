"""The server's handle on one started worker: its process, its socket and its arena."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from multiprocessing.connection import Connection
from typing import Any

from inferd.backends.python import shm
from inferd.backends.python.protocol import Message, decode, encode
from inferd.backends.python.server.launcher import Launcher, WorkerProcess, describe_exit
from inferd.backends.python.server.transfer import ArenaSpace


class WorkerHandle:
    """A started worker process, the server's end of its socket, and its arena (owned here)."""

    def __init__(self, process: WorkerProcess, conn: Connection, arena: shm.Arena | None) -> None:
        self.process = process
        self.conn = conn
        self.space = ArenaSpace(arena) if arena is not None else None
        self.ready = False
        self._send_lock = threading.Lock()  # a decoupled model's reader sends too
        self.named = arena is not None  # the arena's file still has its name in /dev/shm
        # Wait on the socket and on the process's death together: a grandchild the model
        # forked may hold the socket open after the worker died, so EOF alone is not enough.
        self._poller = select.poll()
        self._poller.register(conn.fileno(), select.POLLIN)
        if process.death_fd is not None:
            self._poller.register(process.death_fd, select.POLLIN)

    @property
    def arena(self) -> shm.Arena:
        assert self.space is not None
        return self.space.arena

    def forget_name(self) -> None:
        """Unlink the arena's file once the worker has mapped it: from then on no crash of
        either process can leak it (the memory goes with the last mapping)."""
        if self.named and self.space is not None:
            self.space.arena.unlink()
            self.named = False

    def replace_arena(self, arena: shm.Arena) -> None:
        """Move to ``arena``; the old one is unlinked and unmapped once nothing views it."""
        if self.space is not None:
            self.space.close()
        self.space = ArenaSpace(arena)
        self.named = True

    def send(self, message: Message) -> None:
        data = encode(message)
        with self._send_lock:
            self.conn.send_bytes(data)

    def receive(self, timeout_s: float | None = None) -> Message | None:
        """The next message, or None if the process died (or ``timeout_s`` passed)."""
        timeout_ms = None if timeout_s is None else max(0, int(timeout_s * 1000))
        events = self._poller.poll(timeout_ms)
        if not any(fd == self.conn.fileno() for fd, _ in events):
            return None
        try:
            return decode(self.conn.recv_bytes())
        except (EOFError, OSError):
            return None

    def alive(self) -> bool:
        return self.process.wait(0) is None

    def reap(self, timeout_s: float = 5.0) -> int | None:
        """Make sure the process is gone; its exit code."""
        code = self.process.wait(timeout_s)
        if code is None:
            self.process.kill()
            code = self.process.wait(timeout_s)
        return code

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        self.process.close()
        if self.space is not None:
            self.space.close()
            self.space = None


def launch(
    launcher: Launcher, init: dict[str, Any], arena: shm.Arena | None, name: str
) -> WorkerHandle:
    """Start a worker and send it ``init`` (returns at once; it initialises meanwhile)."""
    init = {"op": "init", **init}
    if arena is not None:
        init["arena"] = [str(arena.path), arena.size]
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    conn = Connection(ours.detach())
    try:
        process = launcher.start(theirs, name)
    except BaseException:
        conn.close()
        if arena is not None:
            arena.close()
        raise
    finally:
        theirs.close()  # the worker holds the only other copy: its death is EOF here
    handle = WorkerHandle(process, conn, arena)
    with contextlib.suppress(OSError):  # died at once: found out when waiting for "ready"
        handle.send(init)
    return handle


def await_ready(w: WorkerHandle, index: int) -> str | None:
    """Wait for a started worker to initialise: None when ready, else why not (and it is
    cleaned up)."""
    if w.ready:
        return None
    message = w.receive()
    if message is not None and message["op"] == "ready":
        w.ready = True
        w.forget_name()
        return None
    if message is not None and message["op"] == "init_error":
        reason = f"initialize() of instance {index} failed: {message['message']}"
    else:
        reason = (
            f"the worker process of instance {index} died while starting "
            f"({describe_exit(w.reap())})"
        )
    w.reap()
    w.release()
    return reason
