"""The default scheduler: every request runs on its own, on the first free instance."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from inferd.core.inference import InferRequest
from inferd.errors import InferdError
from inferd.scheduling.instances import InstancePool, WorkItem


class DirectScheduler:
    def __init__(self, pool: InstancePool) -> None:
        self._pool = pool
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def submit(self, request: InferRequest) -> dict[str, np.ndarray[Any, Any]]:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        self._in_flight += 1
        self._idle.clear()
        try:
            self._pool.put(WorkItem([request], [waiter], loop))
            result = await waiter
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()
        if isinstance(result, InferdError):
            raise result
        return result  # type: ignore[no-any-return]

    async def drain(self) -> None:
        """Wait until no request is in flight."""
        await self._idle.wait()

    def close(self) -> None:
        self._pool.close()
