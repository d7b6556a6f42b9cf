"""A bounded hand-off from the event loop to one writer thread.

``offer`` never blocks: it takes the lock for a few list operations, and a full buffer refuses
the item (the caller counts the drop). The writer takes everything waiting at once, writes it,
then ``release``-s its bytes, so the bound covers the items being written as well as the ones
waiting. The writer is woken when enough has gathered to be worth a write (a quarter of either
bound) and otherwise by its own timeout, so a steady trickle costs no thread wake-up per item.
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
        self._wake_items = max(1, max_items // 4)
        self._wake_bytes = max(1, max_bytes // 4)
        self._items: deque[T] = deque()
        self._held_items = 0  # waiting, or taken and not yet released
        self._held_bytes = 0
        self._closed = False
        self._lock = threading.Lock()  # entered directly on the hot path (no Python frame)
        self._cond = threading.Condition(self._lock)

    def offer(self, item: T, nbytes: int) -> bool:
        """Queue ``item`` (about ``nbytes`` of memory) unless that would pass a bound; an item
        larger than the byte bound is taken only when nothing else is held."""
        with self._lock:
            if self._closed or self._held_items >= self._max_items:
                return False
            if self._held_bytes + nbytes > self._max_bytes and self._held_items:
                return False
            self._items.append(item)
            self._held_items += 1
            self._held_bytes += nbytes
            if len(self._items) >= self._wake_items or self._held_bytes >= self._wake_bytes:
                self._cond.notify()
        return True

    def take(self, timeout_s: float) -> list[T]:
        """Everything waiting, after waiting up to ``timeout_s`` for enough to gather (or for
        :meth:`close`); empty when nothing came."""
        with self._cond:
            if not self._closed and len(self._items) < self._wake_items:
                self._cond.wait(timeout_s)
            taken = list(self._items)
            self._items.clear()
            return taken

    def release(self, items: int, nbytes: int) -> None:
        """The writer is done with ``items`` taken items holding ``nbytes``."""
        with self._cond:
            self._held_items -= items
            self._held_bytes -= nbytes

    def close(self) -> None:
        """Refuse new items and wake the writer; what is waiting can still be taken."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def depth(self) -> tuple[int, int]:
        """Items and bytes held (waiting or being written)."""
        with self._cond:
            return self._held_items, self._held_bytes
