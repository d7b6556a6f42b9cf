"""A bounded hand-off from the event loop to one writer thread, without a lock on the loop's side.

One thread offers (the event loop), one thread takes (the writer). ``offer`` never blocks and
takes no lock: it checks the bounds, appends to a deque (atomic in CPython) and bumps counters
that only the offering thread writes; the writer keeps counters of its own, so each counter has
one writer and the difference of the two is what is held. A full hand-off refuses the item (the
caller counts the drop). The writer takes everything waiting at once, writes it, then
``release``-s it, so the bounds cover the items being written as well as the ones waiting.

The writer wakes on its own timer (``take``'s timeout), or sooner once a quarter of either
bound is waiting: the offer that crosses that mark sets an event, once per batch, so a steady
stream of items costs no thread wake-up per item.
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
        self._items: deque[tuple[T, int]] = deque()
        # written by the offering thread only
        self._offered = 0
        self._offered_bytes = 0
        # written by the taking thread only
        self._taken_bytes = 0
        self._released = 0
        self._released_bytes = 0
        self._closed = False
        self._wake = threading.Event()

    def offer(self, item: T, nbytes: int) -> bool:
        """Queue ``item`` (about ``nbytes`` of memory) unless that would pass a bound; an item
        larger than the byte bound is taken only when nothing else is held. Called from one
        thread only (the event loop)."""
        held = self._offered - self._released
        if self._closed or held >= self._max_items:
            return False
        held_bytes = self._offered_bytes - self._released_bytes
        if held_bytes + nbytes > self._max_bytes and held:
            return False
        self._items.append((item, nbytes))
        self._offered += 1
        self._offered_bytes = offered_bytes = self._offered_bytes + nbytes
        if (
            len(self._items) >= self._wake_items
            or offered_bytes - self._taken_bytes >= self._wake_bytes
        ) and not self._wake.is_set():
            self._wake.set()
        return True

    def take(self, timeout_s: float) -> list[tuple[T, int]]:
        """Everything waiting (each item with its bytes), after waiting up to ``timeout_s`` for
        enough to gather (or for :meth:`close`); empty when nothing came. Called from one
        thread only (the writer)."""
        if not self._closed and len(self._items) < self._wake_items:
            self._wake.wait(timeout_s)
        self._wake.clear()
        pop = self._items.popleft
        taken = [pop() for _ in range(len(self._items))]
        self._taken_bytes += sum(n for _, n in taken)
        return taken

    def release(self, items: int, nbytes: int) -> None:
        """The writer is done with ``items`` taken items holding ``nbytes``."""
        self._released += items
        self._released_bytes += nbytes

    def close(self) -> None:
        """Refuse new items and wake the writer; what is waiting can still be taken."""
        self._closed = True
        self._wake.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def depth(self) -> tuple[int, int]:
        """Items and bytes held (waiting or being written)."""
        return self._offered - self._released, self._offered_bytes - self._released_bytes
