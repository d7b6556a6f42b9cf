"""One instance pool per model instance, for schedulers that choose the instance themselves.

The sequence batcher pins every sequence to one instance (a model may keep per-sequence data
of its own, as Triton allows), so it needs to hand a batch to a given instance rather than to
whichever is idle. :class:`PinnedPools` wraps one single-instance :class:`InstancePool` per
instance and closes them together, running ``then`` once the last instance is closed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

from inferd.backends.base import ModelInstance
from inferd.scheduling.instances import InstancePool, WorkItem
from inferd.scheduling.stats import ModelStats


class PinnedPools:
    """A single-instance pool per instance; ``on_free`` is called when any of them frees."""

    def __init__(
        self,
        name: str,
        instances: Sequence[ModelInstance],
        stats: ModelStats,
        loop: asyncio.AbstractEventLoop,
        *,
        inline_bound_ns: int = 0,
    ) -> None:
        self._pools = [
            InstancePool(f"{name}-i{i}", [instance], stats, loop, inline_bound_ns=inline_bound_ns)
            for i, instance in enumerate(instances)
        ]
        self.on_free: Callable[[], None] | None = None
        for pool in self._pools:
            pool.on_free = self._freed

    def _freed(self) -> None:
        if self.on_free is not None:
            self.on_free()

    @property
    def size(self) -> int:
        return len(self._pools)

    def free_instances(self) -> frozenset[int]:
        """The instances with nothing running (on the event loop thread)."""
        return frozenset(i for i, pool in enumerate(self._pools) if pool.free)

    def put(self, instance: int, item: WorkItem) -> None:
        """Run ``item`` on instance ``instance`` (queued there if it is busy)."""
        self._pools[instance].put(item)

    def close(self, timeout_s: float = 5.0, then: Callable[[], None] | None = None) -> None:
        """Close every pool; ``then`` runs once, after the last instance has closed."""
        self.on_free = None  # its owner's callback would keep the owner alive in a cycle
        remaining = len(self._pools)
        lock = threading.Lock()

        def one_closed() -> None:
            nonlocal remaining
            with lock:
                remaining -= 1
                last = remaining == 0
            if last and then is not None:
                then()

        for pool in self._pools:
            pool.close(timeout_s, then=one_closed)
