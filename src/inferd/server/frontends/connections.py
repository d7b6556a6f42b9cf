"""One HTTP connection limit for all front ends (``--http-max-connections`` with ``--frontends``).

Every front end listens on the same ports, so ``--http-max-connections`` must bound the open
connections of all of them together, and at the limit the longest-idle connection of *any*
front end makes room (``frontends/http/slots.py`` holds the policy; a single process applies
it to its own connections). The front ends share a small table for that:

* a **memfd** (no name in ``/dev/shm``, so nothing is left behind however the processes end),
  created by the engine and inherited by every front end, which reopens it through
  ``/proc/self/fd`` so that each process holds its own open file description;
* a 64-byte header (magic, version, ports, front ends), then one 64-byte line per port (HTTP,
  ``--openai-port``) and front end: ``count`` (its open connections, probe slots excluded),
  ``idle_us`` (since when its longest-idle connection has been idle, in microseconds of the
  monotonic clock the event loops read; 0: none is idle), ``asked`` (requests from other front
  ends to close an idle connection) and ``done`` (those it has served);
* ``flock`` on the table serialises the check-and-count of a new connection and the
  ``asked`` increments (one system call pair per *connection*, not per request; a process
  that dies holding it releases it). Each front end writes its own ``count``, ``idle_us`` and
  ``done`` words alone, with single aligned 8-byte stores (:mod:`.shared`);
* one **eventfd per front end** (the engine's, kept across restarts), rung by the front end
  that asks it to close its longest-idle connection.

A front end that dies leaves its line to the engine, which zeroes it (under the lock) before it
starts the replacement, so a crash leaks no connection slots.

An idle connection another front end is asked to close goes away a moment later (when that
front end's loop runs), so for that moment the count is one over the limit, as it is in a
single process until the closed connection's socket is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import mmap
import os
from collections.abc import Callable, Iterator, Sequence

from .doorbell import Doorbell

__all__ = ["PORTS", "ConnectionTable", "PortCount"]

#: the ports with a connection limit, in the order of their lines
PORTS = ("http", "openai")
_MAGIC = 0x316E6E6F_63666E69  # "infconn1", little-endian
_VERSION = 1
_LINE_WORDS = 8  # 64 bytes
_COUNT, _IDLE_US, _ASKED, _DONE = range(4)


class ConnectionTable:
    """The table of one server: :meth:`create` in the engine, :meth:`attach` in a front end."""

    def __init__(self, fd: int, frontends: int, bells: Sequence[Doorbell], me: int | None) -> None:
        self._fd = fd
        self.frontends = frontends
        self._bells = list(bells)
        self._me = me
        size = (1 + len(PORTS) * frontends) * _LINE_WORDS * 8
        self._mmap: mmap.mmap | None = mmap.mmap(fd, size)
        self._words = memoryview(self._mmap).cast("q")
        self._ports: list[PortCount] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def create(cls, frontends: int) -> ConnectionTable:
        """The engine's table for ``frontends`` front ends, with their doorbells."""
        if frontends < 1:
            raise ValueError("a connection table needs at least one front end")
        fd = os.memfd_create("inferd-connections", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, (1 + len(PORTS) * frontends) * _LINE_WORDS * 8)
            bells = [Doorbell() for _ in range(frontends)]
        except BaseException:
            os.close(fd)
            raise
        table = cls(fd, frontends, bells, None)
        words = table._words
        words[1], words[2], words[3] = _VERSION, len(PORTS), frontends
        words[0] = _MAGIC
        return table

    def fds(self) -> tuple[int, ...]:
        """What a front end inherits (``pass_fds``): the table, then the doorbells."""
        return (self._fd, *(bell.fileno() for bell in self._bells))

    @classmethod
    def attach(cls, fds: Sequence[int], me: int) -> ConnectionTable:
        """Front end ``me``'s view from the descriptors it inherited (:meth:`fds`); the
        inherited table descriptor is closed (this process reopens its own)."""
        inherited, bell_fds = fds[0], fds[1:]
        fd = os.open(f"/proc/self/fd/{inherited}", os.O_RDWR | os.O_CLOEXEC)
        os.close(inherited)
        try:
            header = os.pread(fd, 32, 0)
            magic, version, ports, frontends = (
                int.from_bytes(header[i : i + 8], "little", signed=True) for i in (0, 8, 16, 24)
            )
            if (magic, version, ports) != (_MAGIC, _VERSION, len(PORTS)):
                raise ValueError("not an inferd connection table of this version")
            if frontends != len(bell_fds) or not 0 <= me < frontends:
                raise ValueError(f"connection table of {frontends} front ends, not {me}'s")
        except BaseException:
            os.close(fd)
            for bell_fd in bell_fds:
                os.close(bell_fd)
            raise
        return cls(fd, frontends, [Doorbell.from_fd(b) for b in bell_fds], me)

    # -- the engine's side ------------------------------------------------------------------

    def reset(self, frontend: int) -> None:
        """Forget what front end ``frontend`` held (it has exited; before its replacement)."""
        with self._locked():
            for port in range(len(PORTS)):
                base = self._line(port, frontend)
                words = self._words
                words[base + _COUNT] = 0
                words[base + _IDLE_US] = 0
                words[base + _DONE] = words[base + _ASKED]

    def total(self, port: str) -> int:
        """The open connections of every front end on ``port`` (HTTP or openai)."""
        index = PORTS.index(port)
        return sum(self._words[self._line(index, f) + _COUNT] for f in range(self.frontends))

    # -- a front end's side ------------------------------------------------------------------

    def port(self, name: str) -> PortCount:
        """This front end's count of port ``name`` (for ``start_http_server``)."""
        if self._me is None:
            raise ValueError("only a front end counts connections")
        count = PortCount(self, PORTS.index(name), self._me)
        self._ports.append(count)
        return count

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve other front ends' requests to close an idle connection, on ``loop``."""
        assert self._me is not None
        self._loop = loop
        loop.add_reader(self._bells[self._me].fileno(), self._on_ring)

    def _on_ring(self) -> None:
        assert self._me is not None
        self._bells[self._me].drain()
        for count in self._ports:
            count.serve_requests()

    def close(self) -> None:
        if self._mmap is None:
            return
        if self._loop is not None and self._me is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._bells[self._me].fileno())
        self._words.release()
        self._mmap.close()
        self._mmap = None
        os.close(self._fd)
        for bell in self._bells:
            bell.close()

    # -- shared ------------------------------------------------------------------------------

    def _line(self, port: int, frontend: int) -> int:
        return (1 + port * self.frontends + frontend) * _LINE_WORDS

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _ring(self, frontend: int) -> None:
        self._bells[frontend].ring()


class PortCount:
    """One front end's share of one port's count
    (:class:`inferd.frontends.http.slots.SharedCount`)."""

    def __init__(self, table: ConnectionTable, port: int, me: int) -> None:
        self._table = table
        self._words = table._words
        self._me = me
        self._lines = [table._line(port, f) for f in range(table.frontends)]
        self._mine = self._lines[me]
        self._closer: Callable[[], None] | None = None

    def take(self, limit: int) -> bool:
        words = self._words
        with self._table._locked():
            if sum(words[line + _COUNT] for line in self._lines) >= limit:
                return False
            words[self._mine + _COUNT] += 1
        return True

    def take_over(self) -> None:
        self._words[self._mine + _COUNT] += 1

    def release(self) -> None:
        self._words[self._mine + _COUNT] -= 1

    def publish_idle(self, since: float | None) -> None:
        self._words[self._mine + _IDLE_US] = 0 if since is None else max(1, int(since * 1e6))

    def oldest_elsewhere(self) -> tuple[float, int] | None:
        words = self._words
        found: tuple[int, int] | None = None
        for frontend, line in enumerate(self._lines):
            since = words[line + _IDLE_US]
            if frontend != self._me and since and (found is None or since < found[0]):
                found = (since, frontend)
        return None if found is None else (found[0] / 1e6, found[1])

    def ask_to_close_idle(self, holder: int) -> None:
        with self._table._locked():
            self._words[self._lines[holder] + _ASKED] += 1
        self._table._ring(holder)

    def set_closer(self, close_idle: Callable[[], None]) -> None:
        self._closer = close_idle

    def serve_requests(self) -> None:
        """Close one idle connection per request not yet served."""
        words, line = self._words, self._mine
        asked = words[line + _ASKED]
        pending = asked - words[line + _DONE]
        words[line + _DONE] = asked
        if self._closer is not None:
            for _ in range(max(0, pending)):
                self._closer()
