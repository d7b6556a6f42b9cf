"""The payload log's bounds, and the hand-off of encoded chunks to the writer thread.

``admit`` is called for every sampled request, on the event loop: it checks the bounds and
counts the record as held, with no lock (the counters it writes are written by no other
thread; the ones it reads are replaced whole by others). A record stays held while it waits
to be encoded, while its chunk waits for the writer and while the writer writes it; ``release``
ends that. ``offer`` hands a chunk to the writer and wakes it: once per chunk, not per record.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

__all__ = ["HandOff"]

T = TypeVar("T")


class HandOff(Generic[T]):
    def __init__(self, max_items: int, max_bytes: int) -> None:
        if max_items < 1 or max_bytes < 1:
            raise ValueError("a hand-off needs room for at least one item and one byte")
        self._max_items = max_items
        self._max_bytes = max_bytes
        # written by the admitting thread only
        self._admitted = 0
        self._admitted_bytes = 0
        # written under the lock
        self._released = 0
        self._released_bytes = 0
        self._chunks: deque[T] = deque()
        self._sealed = False  # no more records admitted
        self._closed = False  # and the writer may finish once it has taken every chunk
        self._lock = threading.Lock()
        self._wake = threading.Event()

    def admit(self, nbytes: int) -> bool:
        """Count a record of about ``nbytes`` as held, unless that would pass a bound (a record
        larger than the byte bound is admitted only when nothing else is held). Called from one
        thread only (the event loop)."""
        held = self._admitted - self._released
        if self._sealed or held >= self._max_items:
            return False
        if self._admitted_bytes - self._released_bytes + nbytes > self._max_bytes and held:
            return False
        self._admitted += 1
        self._admitted_bytes += nbytes
        return True

    def offer(self, chunk: T) -> None:
        """Hand ``chunk`` (of admitted records) to the writer and wake it."""
        self._chunks.append(chunk)
        self._wake.set()

    def take(self, timeout_s: float) -> list[T]:
        """Every chunk waiting, after waiting up to ``timeout_s`` for one (or for
        :meth:`close`); empty when none came. Called from one thread only (the writer)."""
        if not self._chunks and not self._closed:
            self._wake.wait(timeout_s)
        self._wake.clear()
        pop = self._chunks.popleft
        return [pop() for _ in range(len(self._chunks))]

    def release(self, items: int, nbytes: int) -> None:
        """``items`` held records holding ``nbytes`` are written, or lost."""
        with self._lock:
            self._released += items
            self._released_bytes += nbytes

    def wake(self) -> None:
        """Wake the writer before its timer."""
        self._wake.set()

    def seal(self) -> None:
        """Admit no more records (the ones admitted can still be offered)."""
        self._sealed = True

    def close(self) -> None:
        """Seal, and let the writer finish once it has taken every chunk offered so far."""
        self._sealed = True
        self._closed = True
        self._wake.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def depth(self) -> tuple[int, int]:
        """Records and bytes held (waiting to be encoded or written, or being written)."""
        return self._admitted - self._released, self._admitted_bytes - self._released_bytes
