"""An eventfd doorbell: one process rings, another sleeps until it is rung.

An eventfd is a 64-bit counter in the kernel behind a file descriptor (Linux, ``os.eventfd``).
:meth:`Doorbell.ring` adds one (one ``write`` system call); the descriptor is readable while the
counter is non-zero; :meth:`Doorbell.drain` reads and resets it, returning how many rings it
held. The descriptor is non-blocking, so an event loop watches it with ``loop.add_reader`` and
a plain thread with :meth:`Doorbell.wait` (``poll``).

The rings decide when to ring (:mod:`.ring`): only when a ring goes from empty to non-empty, so
a consumer that is behind costs its producers no system call at all. The system calls a wake-up
does cost (the producer's ``write``, the consumer's ``read``) are full memory barriers too.

Sharing: the descriptor crosses into a child process by inheritance. Pickled while a
``multiprocessing`` process is being spawned (an argument of ``Process``), a doorbell is
duplicated into the child through ``multiprocessing.reduction.DupFd``; a child started with
``subprocess`` gets it through ``pass_fds`` and :meth:`Doorbell.from_fd`.
"""

from __future__ import annotations

import contextlib
import os
import select
from multiprocessing import reduction
from typing import Any


class Doorbell:
    """An eventfd the creator owns and closes; see the module docstring."""

    def __init__(self, fd: int | None = None) -> None:
        if fd is None:
            if not hasattr(os, "eventfd"):
                raise RuntimeError("doorbells need os.eventfd (Linux)")
            fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._fd = fd
        #: how many times this process rang (for statistics and tests)
        self.rung = 0

    @classmethod
    def from_fd(cls, fd: int) -> Doorbell:
        """Adopt an eventfd inherited from the parent (made non-blocking, close-on-exec)."""
        os.set_blocking(fd, False)
        os.set_inheritable(fd, False)
        return cls(fd)

    def duplicate(self) -> Doorbell:
        """Another descriptor for the same eventfd, closed independently."""
        return Doorbell(os.dup(self.fileno()))

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError("doorbell is closed")
        return self._fd

    def ring(self) -> None:
        self.rung += 1
        # BlockingIOError: the counter is at its maximum, so it is rung already
        with contextlib.suppress(BlockingIOError):
            os.eventfd_write(self._fd, 1)

    def drain(self) -> int:
        """Reset the counter; return how many rings it held (0 if none)."""
        try:
            return os.eventfd_read(self._fd)
        except BlockingIOError:
            return 0

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block the calling thread until rung (without draining); False on timeout."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        timeout_ms = None if timeout_s is None else max(0, int(timeout_s * 1000))
        return bool(poller.poll(timeout_ms))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (reduction.DupFd(self.fileno()),))


def _rebuild(dup: Any) -> Doorbell:
    return Doorbell.from_fd(dup.detach())
