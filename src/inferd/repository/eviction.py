"""The eviction policy: which idle models leave so that a load fits the memory budget.

One pure function of data, like the batching policy (``scheduling/policy.py``): the on-demand
loader snapshots the resident models, calls :func:`choose_victims` and unloads what it names.
The rules:

- a model with requests in flight is never chosen, nor one the operator pinned;
- a model loaded less than ``min_residency_s`` ago is never chosen, so two hot models that do
  not fit together cannot unload each other on every request (the loader counts those refusals
  as thrash);
- among the others, the least recently used go first, and only as many as the load needs;
- if even every allowed victim would not make room, none is chosen (nothing is unloaded for a
  load that cannot happen now).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Choice", "EvictionConfig", "Resident", "choose_victims"]


@dataclass(frozen=True, slots=True)
class Resident:
    """One loaded model as the policy sees it (times in seconds on the loader's clock)."""

    name: str
    size_bytes: int
    last_used_s: float
    loaded_at_s: float
    in_flight: int = 0
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class EvictionConfig:
    min_residency_s: float = 10.0


@dataclass(frozen=True, slots=True)
class Choice:
    """The models to unload, least recently used first; ``fits``: the load fits once they are
    gone; ``held_by_residency``: models that would have made room but were loaded too
    recently (a load refused because of them is a thrash the residency prevented)."""

    victims: list[str] = field(default_factory=list)
    fits: bool = True
    held_by_residency: list[str] = field(default_factory=list)


def choose_victims(
    resident: Sequence[Resident],
    need_bytes: int,
    budget: int,
    now: float,
    cfg: EvictionConfig,
) -> Choice:
    """The least recently used idle models to unload so that ``need_bytes`` more fit in
    ``budget`` (the bytes the budget leaves for models: the server's own baseline is already
    taken out)."""
    used = sum(r.size_bytes for r in resident)
    excess = used + need_bytes - budget
    if excess <= 0:
        return Choice()
    if need_bytes > budget:
        return Choice(fits=False)
    idle = [r for r in resident if r.in_flight == 0 and not r.pinned]
    allowed = [r for r in idle if now - r.loaded_at_s >= cfg.min_residency_s]
    allowed.sort(key=lambda r: (r.last_used_s, r.name))
    victims: list[str] = []
    freed = 0
    for r in allowed:
        if freed >= excess:
            break
        victims.append(r.name)
        freed += r.size_bytes
    if freed >= excess:
        return Choice(victims)
    young = [r for r in idle if now - r.loaded_at_s < cfg.min_residency_s]
    held = []
    if freed + sum(r.size_bytes for r in young) >= excess:
        held = sorted(r.name for r in young)
    return Choice(fits=False, held_by_residency=held)
