"""The default scheduler: every request runs on its own, on the first free instance."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from inferd.core.clock import Clock, SystemClock
from inferd.core.inference import InferRequest
from inferd.scheduling.instances import InstancePool, WorkItem
from inferd.scheduling.stats import ModelStats


class DirectScheduler:
    def __init__(self, pool: InstancePool, stats: ModelStats, clock: Clock | None = None) -> None:
        self._pool = pool
        self._clock = clock or SystemClock()
        self.stats = stats
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        stats.pending_source = lambda: max(0, self._in_flight - pool.size)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def submit(self, request: InferRequest, rows: int = 1) -> dict[str, np.ndarray[Any, Any]]:
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._in_flight += 1
        self._idle.clear()
        try:
            self._pool.put(WorkItem([request], [waiter], [self._clock.monotonic_ns()], rows))
            if waiter.done():
                # run inline: awaiting a finished future does not suspend, so a caller that
                # submits in a loop would never let the event loop run anything else
                await asyncio.sleep(0)
            return await waiter  # type: ignore[no-any-return]
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def drain(self) -> None:
        """Wait until no request is in flight."""
        await self._idle.wait()

    def shutdown(self) -> None:
        """Nothing waits outside the pool; present for symmetry with the batcher."""
