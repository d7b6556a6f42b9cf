"""Refilling free room (``--model-refill``): evicted models loaded again before they are asked for.

When a large model leaves to make room for a small one, most of its room stays free until
misses fill it, one request's wait at a time. With ``--model-refill`` the loader fills it
ahead of the requests: while no load waits for room and a load thread is free, it loads the
evicted model most worth keeping per byte that was asked for lately and fits in room that no
model holds and no load has reserved (:func:`inferd.repository.eviction.refill_choice`), one
refill at a time. A refill never unloads anything; a refilled model leaves, like any idle
model, when a request's load needs its room. Each is counted in
``inferd_model_loads_total{reason="refill"}``. Refills cost loading time that requests share
the cores with; ``docs/multi-model.md`` has what they bought on the mixed benchmark.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Protocol

from inferd.errors import InferdError
from inferd.repository.eviction import Resident
from inferd.repository.on_demand_state import ModelRecord

_log = logging.getLogger("inferd.repository")

__all__ = ["REFILL_REASON", "RefillingLoader", "refill_candidates", "refill_free_room"]

#: the load reason of a refill (``inferd_model_loads_total{reason}``)
REFILL_REASON = "refill"


class RefillingLoader(Protocol):
    """What the refill asks of the loader."""

    async def refill_candidate(self) -> str | None:
        """The model to load into free room now, if any."""
        ...

    async def ensure(self, name: str, *, reason: str = "") -> None:
        """Load ``name`` (or join its load under way) and return once it is loaded."""
        ...


def refill_candidates(
    models: Mapping[str, ModelRecord],
    busy: Collection[str],
    transient: Callable[[ModelRecord, int], int],
) -> list[tuple[Resident, int]]:
    """The models a refill may load, each with the bytes its load needs (its size and its
    transient peak): loaded before, not loaded or loading now (``busy``), not failed, not too
    big for the budget."""
    return [
        (
            Resident(
                n, m.size_bytes, m.last_used_s, m.loaded_at_s, heat=m.heat, reload_s=m.reload_s
            ),
            m.size_bytes + transient(m, m.size_bytes),
        )
        for n, m in models.items()
        if m.loads and not (m.failed or m.too_big or n in busy)
    ]


async def refill_free_room(loader: RefillingLoader, interval_s: float) -> None:
    """Refill one model at a time until cancelled; look again every ``interval_s`` while
    there is nothing to refill."""
    while True:
        name = await loader.refill_candidate()
        if name is None:
            await asyncio.sleep(interval_s)
            continue
        try:
            await loader.ensure(name, reason=REFILL_REASON)
        except InferdError as exc:  # its error answers its requests; no retry from here
            _log.info("model '%s' was not refilled: %s", name, exc)
            await asyncio.sleep(interval_s)
