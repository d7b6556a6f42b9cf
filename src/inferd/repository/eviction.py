"""The eviction policy: which idle models leave so that a load fits the memory budget.

One pure function of data, like the batching policy (``scheduling/policy.py``): the on-demand
loader snapshots the resident models, calls :func:`choose_victims` and unloads what it names.
The rules:

- a model with requests in flight is never chosen, nor one the operator pinned;
- a model loaded less than ``min_residency_s`` ago is never chosen, so two hot models that do
  not fit together cannot unload each other on every request (the loader counts those refusals
  as thrash); with ``cost``, only a hot one that thrashes (loaded again less than the minimum
  residency after its eviction, and asked for at least twice per minimum residency at its
  recent rate), and only against a load that cannot fit without it: when the other idle
  models can make room, it is ranked with them (see :func:`_protected` for why);
- among the others, the policy orders who goes first (``lru``: the least recently used;
  ``cost``: the least worth keeping per byte, see :func:`keep_value`), and only as many leave
  as the load needs: taken in that order, then those a later, larger victim made unneeded
  are spared;
- if even every allowed victim would not make room, none is chosen (nothing is unloaded for a
  load that cannot happen now); the memory watch asks for them all the same (``partial``):
  over the budget with no load waiting, each unload brings the process closer to it;
- with ``cost``, when a model serving a request now would make room for far fewer expected
  reloads than the idle victims would (a large model that is rarely asked for, busy with one
  request, against many small models asked for often), :func:`cheaper_when_idle` names it:
  the loader waits a little for it to go idle rather than flush the busy small ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

__all__ = [
    "DEFER_MAX_S",
    "DEFER_RATIO",
    "HOLD_MIN_REQUESTS",
    "HOLD_ONLY_WHEN_NEEDED",
    "POLICIES",
    "Choice",
    "EvictionConfig",
    "Resident",
    "cheaper_when_idle",
    "choose_victims",
    "decayed_heat",
    "keep_value",
    "reload_cost",
    "request_rate",
]

#: the eviction orders ``--model-eviction`` accepts
POLICIES = ("lru", "cost")
#: a reload never counts as cheaper than this (a load's measured time can round to 0)
_MIN_RELOAD_S = 0.001
#: ``cost`` holds a model that thrashes only if it is asked for at least this often per minimum
#: residency (at its recent rate): a hold saves no reload of a model not asked for during it,
#: and makes the load that waits for it wait for nothing
HOLD_MIN_REQUESTS = 2.0
#: ``cost`` holds such a model only against a load that cannot fit without it (False: against
#: every load, the other idle models leaving in its place; ``bench/residency_sim.py`` compares)
HOLD_ONLY_WHEN_NEEDED = True
#: ``cost`` waits for a busy model (rather than unload idle ones now) only if the idle victims
#: would cost at least this many times the expected reloads of the choice once it is idle
DEFER_RATIO = 4.0
#: and at most this long (and no longer than the waiting load itself is expected to take)
DEFER_MAX_S = 1.0


@dataclass(frozen=True, slots=True)
class Resident:
    """One loaded model as the policy sees it (times in seconds on the loader's clock)."""

    name: str
    size_bytes: int
    last_used_s: float
    loaded_at_s: float
    in_flight: int = 0
    pinned: bool = False
    heat: float = 0.0  # requests, each decayed by its age (half-life ``heat_half_life_s``)
    reload_s: float = 0.0  # what loading it again costs: its measured load time
    # how long after its last eviction this load of it came (inf: never evicted before)
    reloaded_after_s: float = math.inf


@dataclass(frozen=True, slots=True)
class EvictionConfig:
    """``policy``: ``lru`` or ``cost``; ``heat_half_life_s``: how fast ``cost`` forgets
    requests (a model that stopped being asked for loses half its heat per half-life)."""

    min_residency_s: float = 10.0
    policy: str = "lru"
    heat_half_life_s: float = 30.0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown eviction policy {self.policy!r}: one of {POLICIES}")
        if not self.heat_half_life_s > 0:
            raise ValueError("the heat half-life must be > 0")


def decayed_heat(heat: float, since_s: float, half_life_s: float) -> float:
    """``heat`` (requests, as of ``since_s`` seconds ago) decayed to now."""
    return heat * math.pow(0.5, max(0.0, since_s) / half_life_s)


def request_rate(r: Resident, now: float, cfg: EvictionConfig) -> float:
    """``r``'s recent requests a second: its heat decayed to now over the heat's mean life
    (a model asked for ``x`` times a second for long has a heat of ``x`` times the mean life,
    ``heat_half_life_s / ln 2``)."""
    heat = decayed_heat(r.heat, now - r.last_used_s, cfg.heat_half_life_s)
    return heat * math.log(2) / cfg.heat_half_life_s


def keep_value(r: Resident, now: float, cfg: EvictionConfig) -> float:
    """What keeping ``r`` is worth per byte (``cost`` evicts the lowest first): its request
    rate (recent requests, decayed with a half-life) times the seconds a reload would cost,
    over its size, as GreedyDual-Size-Frequency weighs a cache entry. A small model asked for
    often outweighs a large one asked for as often; a slow load outweighs a fast one."""
    heat = decayed_heat(r.heat, now - r.last_used_s, cfg.heat_half_life_s)
    return heat * max(r.reload_s, _MIN_RELOAD_S) / max(r.size_bytes, 1)


@dataclass(frozen=True, slots=True)
class Choice:
    """The models to unload, in the order the policy ranks them; ``fits``: the load fits once
    they are gone; ``held_by_residency``: models that would have made room but were loaded too
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
    *,
    partial: bool = False,
) -> Choice:
    """The idle models to unload so that ``need_bytes`` more fit in ``budget`` (the bytes the
    budget leaves for models: the server's own baseline is already taken out): the least
    recently used first (``lru``) or the least worth keeping per byte first (``cost``).
    ``partial``: when no choice makes it fit, name every model that may leave (``fits`` stays
    False): the memory watch unloads them to come closer to the budget."""
    used = sum(r.size_bytes for r in resident)
    excess = used + need_bytes - budget
    if excess <= 0:
        return Choice()
    if need_bytes > budget and not partial:
        return Choice(fits=False)
    idle = [r for r in resident if r.in_flight == 0 and not r.pinned]
    allowed = [r for r in idle if not _protected(r, now, cfg)]
    if cfg.policy == "cost":
        if HOLD_ONLY_WHEN_NEEDED and sum(r.size_bytes for r in allowed) >= excess:
            allowed = idle  # it fits without the held models: they rank with the others
        allowed.sort(key=lambda r: (keep_value(r, now, cfg), r.last_used_s, r.name))
    else:
        allowed.sort(key=lambda r: (r.last_used_s, r.name))
    victims: list[str] = []
    freed = 0
    for r in allowed:
        if freed >= excess:
            break
        victims.append(r.name)
        freed += r.size_bytes
    if freed >= excess:
        return Choice(_spare(victims, {r.name: r.size_bytes for r in allowed}, freed, excess))
    young = [r for r in idle if _protected(r, now, cfg)]
    held = []
    if freed + sum(r.size_bytes for r in young) >= excess:
        held = sorted(r.name for r in young)
    return Choice(victims if partial else [], fits=False, held_by_residency=held)


def reload_cost(
    resident: Sequence[Resident], names: Sequence[str], now: float, cfg: EvictionConfig
) -> float:
    """The reloads a second that unloading ``names`` is expected to cost, in seconds of load:
    each one's recent request rate times its load time (its keep value times its size)."""
    chosen = set(names)
    return sum(keep_value(r, now, cfg) * max(r.size_bytes, 1) for r in resident if r.name in chosen)


def cheaper_when_idle(
    resident: Sequence[Resident],
    need_bytes: int,
    budget: int,
    now: float,
    cfg: EvictionConfig,
    choice: Choice,
) -> list[str]:
    """With ``cost``: the busy models (requests in flight, not pinned) whose unloading, once
    they are idle, would make room for ``need_bytes`` at less than 1 / :data:`DEFER_RATIO` of
    the expected reloads of ``choice``'s victims; empty when waiting for them is not worth it.

    A load of a large model that fits only by unloading dozens of small, often requested
    models, while a large model asked for once in a while is serving its one request, would
    flush what the next seconds' requests need; the loader waits briefly for the large one."""
    if cfg.policy != "cost" or not choice.fits or not choice.victims:
        return []
    busy = {r.name for r in resident if r.in_flight and not r.pinned}
    if not busy:
        return []
    idle = [replace(r, in_flight=0) if r.name in busy else r for r in resident]
    soon = choose_victims(idle, need_bytes, budget, now, cfg)
    waited_for = sorted(busy.intersection(soon.victims))
    if not soon.fits or not waited_for:
        return []
    later = reload_cost(idle, soon.victims, now, cfg)
    if later * DEFER_RATIO >= reload_cost(resident, choice.victims, now, cfg):
        return []
    return waited_for


def _protected(r: Resident, now: float, cfg: EvictionConfig) -> bool:
    """Loaded less than the minimum residency ago; with ``cost``, only a hot model that
    thrashes: loaded again less than the minimum residency after its eviction, and asked for
    at least :data:`HOLD_MIN_REQUESTS` times per minimum residency at its recent rate; and
    :func:`choose_victims` holds it only against a load that cannot fit without it.

    Two hot models that do not fit together are what the residency is for: without it each
    request of one unloads the other. Holding more costs the traffic (``bench/residency_sim.py``,
    the mixed benchmark's catalogue): every young model held lets the tail of a catalogue
    (each asked for once in a while, each a miss that loads it) fill the budget; a large model
    that ``cost`` ranks lowest per byte, evicted for small ones and back a few seconds later,
    held for the residency, takes a third of the budget from the small busy models, which
    then miss, and is out again before its next request. Ranking it with the others when they
    can make room leaves the choice to the cost order, which weighs its reload time already."""
    if now - r.loaded_at_s >= cfg.min_residency_s:
        return False
    if cfg.policy == "cost":
        return (
            r.reloaded_after_s < cfg.min_residency_s
            and request_rate(r, now, cfg) * cfg.min_residency_s >= HOLD_MIN_REQUESTS
        )
    return True


def _spare(victims: list[str], sizes: dict[str, int], freed: int, excess: int) -> list[str]:
    """Keep the victims the load turned out not to need: taken in order, the last (largest)
    one often frees enough alone, and the small ones before it need not leave. The most
    worth keeping are spared first (the list is in the policy's order, least worth first)."""
    kept = list(victims)
    for name in reversed(victims[:-1]):
        if freed - sizes[name] >= excess:
            freed -= sizes[name]
            kept.remove(name)
    return kept
