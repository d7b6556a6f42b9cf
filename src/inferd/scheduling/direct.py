"""The default scheduler: every request runs on its own, on the first free instance.

The scheduler is OPEN until :meth:`DirectScheduler.shutdown`, then CLOSING while requests it
accepted are still in its pool, then CLOSED (:mod:`inferd.scheduling.lifecycle`); a request
submitted once it is closing fails at once with :class:`~inferd.errors.UnavailableError`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from inferd.core.clock import Clock, SystemClock
from inferd.core.inference import InferRequest
from inferd.scheduling.instances import InstancePool, WorkItem
from inferd.scheduling.lifecycle import RunState, Stateful, unloading_error
from inferd.scheduling.stats import ModelStats


class DirectScheduler(Stateful):
    def __init__(self, pool: InstancePool, stats: ModelStats, clock: Clock | None = None) -> None:
        self._pool = pool
        self._clock = clock or SystemClock()
        self.stats = stats
        self._init_work()
        stats.watch(self.pending_count)

    def pending_count(self) -> int:
        """Requests waiting for a free instance."""
        return max(0, self._in_flight - self._pool.size)

    async def submit(self, request: InferRequest, rows: int = 1) -> dict[str, np.ndarray[Any, Any]]:
        if self._state is not RunState.OPEN:
            self.stats.record_rejection("unloading")
            raise unloading_error(self.stats.name, self.stats.version)
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._work_begins()
        try:
            self._pool.put(WorkItem([request], [waiter], [self._clock.monotonic_ns()], rows))
            if waiter.done():
                # run inline: awaiting a finished future does not suspend, so a caller that
                # submits in a loop would never let the event loop run anything else
                await asyncio.sleep(0)
            return await waiter  # type: ignore[no-any-return]
        finally:
            self._work_ends()

    def shutdown(self) -> None:
        """Refuse new requests from now on (on the event loop thread); those in flight finish
        in the pool, or fail there once it closes."""
        if self._begin_closing():
            self._closed_if_idle()
