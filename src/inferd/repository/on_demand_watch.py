"""The memory watch of on-demand loading: between loads, the resident set against the budget.

Between loads the resident set moves too (inference buffers, memory an unload gave back after
its trim, the server's own growth): every ``watch_s``, when the process is over the budget at
two looks in a row, the watch hands back what the allocator keeps, then unloads idle models
(the minimum residency, pins and requests in flight hold as for a load): enough to fit where
that can be done, otherwise every model that may leave now, since each brings the process
closer to the budget.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from inferd.repository.eviction import Choice

_log = logging.getLogger("inferd.repository")

__all__ = ["WatchedLoader", "watch_memory"]


class WatchedLoader(Protocol):
    """What the watch asks of the loader."""

    async def over_budget(self) -> tuple[int, int]:
        """Measured now: the bytes the process exceeds the budget by (<= 0: within it), and
        what it holds beyond its baseline, its models and the loads under way."""
        ...

    async def give_back(self) -> None:
        """Hand back what the allocator keeps (not counted as any load's growth)."""
        ...

    def choose_for_watch(self, unaccounted: int) -> Choice:
        """The idle models whose unload brings the process within the budget, or closer."""
        ...

    async def evict_all(self, victims: list[str], for_name: str) -> None:
        """Unload ``victims`` in turn (``for_name``: the load they make room for; "": none)."""
        ...


async def watch_memory(loader: WatchedLoader, interval_s: float) -> None:
    """Look every ``interval_s`` until cancelled; act when over the budget twice in a row."""
    was_over = False
    while True:
        await asyncio.sleep(interval_s)
        over_now = (await loader.over_budget())[0] > 0
        # over at two looks in a row: a load's transient peak (reserved at its admission) is
        # gone by the time an unload would end, and is not worth a model
        was_over, persists = over_now, over_now and was_over
        if not persists:
            continue
        await loader.give_back()
        excess, unaccounted = await loader.over_budget()
        if excess <= 0:
            continue
        choice = loader.choose_for_watch(unaccounted)
        if not choice.victims:
            what = "no idle model may leave now"
        elif choice.fits:
            what = f"unloading {len(choice.victims)} idle models"
        else:
            what = (
                f"unloading the {len(choice.victims)} idle models that may leave now (not "
                "enough to fit: the rest have requests in flight, are pinned, or are young)"
            )
        _log.info(
            "resident set over the memory budget by %d bytes (%d beyond the models): %s",
            excess,
            unaccounted,
            what,
        )
        if choice.victims:
            await loader.evict_all(choice.victims, "")
