"""The components' state as the collectors read it: copied on the event loop at each scrape.

A scrape renders in a worker thread: with hundreds of models the exposition is a megabyte of
text and 80-200 ms of work, which on the event loop would hold up every request meanwhile
(``bench/metrics_scrape.py``). The state the collectors read (each component's
``statistics()``, which copies it) belongs to the loop, so the collectors read it through a
:class:`LoopRead`: the endpoint calls :meth:`LoopReads.take` on the loop just before the render
and :meth:`LoopReads.drop` after it, and the render thread reads only those copies. Outside a
scrape (a test rendering a registry itself) a read calls through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["LoopRead", "LoopReads"]

T = TypeVar("T")


class LoopRead(Generic[T]):
    """One read of loop-owned state: the value taken on the loop while a scrape renders."""

    __slots__ = ("_held", "_read", "_value")

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._value: T | None = None
        self._held = False

    def take(self) -> None:
        self._value = self._read()
        self._held = True

    def drop(self) -> None:
        self._value = None
        self._held = False

    def __call__(self) -> T:
        if not self._held:
            return self._read()
        return self._value  # type: ignore[return-value]  # held: what take() read


class LoopReads:
    """The reads behind one registry's collectors; ``reads(fn)`` wraps ``fn`` as one of them."""

    def __init__(self) -> None:
        self._reads: list[LoopRead[Any]] = []

    def __call__(self, read: Callable[[], T]) -> LoopRead[T]:
        wrapped = LoopRead(read)
        self._reads.append(wrapped)
        return wrapped

    def take(self) -> None:
        """On the loop: read every component's state for the render to come."""
        try:
            for read in self._reads:
                read.take()
        except BaseException:
            self.drop()
            raise

    def drop(self) -> None:
        for read in self._reads:
            read.drop()
