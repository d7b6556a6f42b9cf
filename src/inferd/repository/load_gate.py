"""Which waiting on-demand load takes the next free load thread.

Under a budget the loads queue: on two busy cores, 25 loads waited behind the 4 threads at
each load's start in the mixed benchmark, about half a second each. Every request for a model
that arrives while its load waits is one more miss, so the order of the queue decides how many
misses a load costs. :class:`LoadGate` takes the waiting load whose model loses the most
requests per second of loading first: its recent requests and those waiting on it, over the
time its last load held a thread (else the median of the last loads'): Smith's rule for the
least weighted waiting. First come, first served (the semaphore before it) let a model asked
for every 100 ms wait behind ten models asked for once. A load that has waited ``patience_s``
goes before any other, the longest waiting first, so a model rarely asked for still loads well
within its requests' wait bound.

A load can ask to run *alone*: it takes every thread, so it starts once the loads under way
have ended and no other begins before it ends (the on-demand loader reads a load's transient
peak from the process's peak resident set, which is that load's own only then). While it is
the one chosen to go next, the threads that free up wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

__all__ = ["LoadGate"]

_RECENT = 15  # loads whose thread time gives the median for a model never loaded


@dataclass(slots=True)
class _Waiter:
    name: str
    since: float  # loop time it began to wait
    granted: asyncio.Future[None]
    threads: int  # 1, or every thread for a load that runs alone


class LoadGate:
    """At most ``slots`` loads at a time. ``demand(name)``: the model's recent requests and
    those waiting on it (read when a thread frees, so a model asked for while its load waits
    moves up), over the seconds its load holds a thread (measured here)."""

    def __init__(self, slots: int, demand: Callable[[str], float], patience_s: float) -> None:
        self._slots = self._free = max(1, slots)
        self._demand = demand
        self.patience_s = patience_s
        self._waiting: list[_Waiter] = []
        self._took: dict[str, float] = {}  # per model, the seconds its last load held a thread
        self._recent: list[float] = []

    def waiting(self) -> int:
        return len(self._waiting)

    @contextlib.asynccontextmanager
    async def slot(self, name: str, *, alone: bool = False) -> AsyncIterator[None]:
        """Hold a load thread (``alone``: all of them) for ``name``'s load."""
        loop = asyncio.get_running_loop()
        threads = self._slots if alone else 1
        if self._free >= threads and not self._waiting:
            self._free -= threads
        else:
            waiter = _Waiter(name, loop.time(), loop.create_future(), threads)
            self._waiting.append(waiter)
            self._grant()  # threads held back for a load that runs alone may go to this one
            try:
                await waiter.granted
            except asyncio.CancelledError:
                if waiter in self._waiting:
                    self._waiting.remove(waiter)
                    self._grant()  # threads held back for it go to the others
                elif waiter.granted.done() and not waiter.granted.cancelled():
                    self._release(threads)  # granted as it was cancelled: the threads go on
                raise
        started = loop.time()
        try:
            yield
        finally:
            took = self._took[name] = loop.time() - started
            self._recent[:] = [*self._recent, took][-_RECENT:]
            self._release(threads)

    def worth(self, name: str) -> float:
        """Misses a second of ``name``'s load costs: its demand over its thread time."""
        took = self._took.get(name)
        if took is None:
            took = statistics.median(self._recent) if self._recent else 1.0
        return self._demand(name) / max(took, 1e-3)

    def _release(self, threads: int) -> None:
        self._free += threads
        self._grant()

    def _grant(self) -> None:
        """Hand free threads to the waiting loads worth the most; when the one chosen runs
        alone and not all threads are free yet, the free ones wait for it."""
        loop = asyncio.get_running_loop()
        while self._waiting:
            chosen = self._next(loop.time())
            if chosen.granted.done():  # cancelled, not yet out of the queue: skipped
                self._waiting.remove(chosen)
                continue
            if chosen.threads > self._free:
                return
            self._waiting.remove(chosen)
            self._free -= chosen.threads
            chosen.granted.set_result(None)

    def _next(self, now: float) -> _Waiter:
        """The waiter to go next at loop time ``now`` (there is one at least)."""
        overdue = [w for w in self._waiting if now - w.since >= self.patience_s]
        if overdue:
            return min(overdue, key=lambda w: w.since)
        # ties (nothing known of either): first come, first served
        return max(self._waiting, key=lambda w: (self.worth(w.name), -w.since))
