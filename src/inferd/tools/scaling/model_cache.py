"""How many pods a catalogue of models needs when each pod holds what its memory budget allows
(``inferd serve --model-control-mode=on-demand --model-memory-budget``).

Each pod's resident models are an LRU cache of the catalogue, measured in bytes. Requests are
modelled as independent draws from a fixed popularity law (the independent reference model),
Zipf by default: model *i* (1-based rank) is asked for with probability proportional to
``1 / i**s``. Che's approximation gives an LRU cache's hit ratio under that model: the cache
keeps a model while it was asked for within a *characteristic time* ``T``, the one at which the
expected bytes held fill the cache,

    sum_i size_i * (1 - exp(-p_i * T)) = capacity,

and model *i* is found resident with probability ``1 - exp(-p_i * T)``, so the hit ratio is
``sum_i p_i * (1 - exp(-p_i * T))`` (Che, Tung and Wang, 2002; Fricker, Robert and Roberts, 2012
on why it is accurate). A model larger than the whole capacity is never resident (inferd
refuses it).

Two ways of spreading models over pods:

- **sharded**: a router sends each model's requests to one pod (by model name), so ``P`` pods
  hold ``P`` times as many models. Models are dealt to pods by popularity rank (rank *i* to pod
  ``i mod P``), which is what hashing names gives on average;
- **replicated**: every pod serves every model behind a plain load balancer; each pod sees the
  whole popularity law, so its hit ratio does not grow with the number of pods.

For ``--model-eviction cost`` (which keeps the models of most requests per byte, weighted by
their load times), :func:`size_aware_hit_ratio` gives the ceiling such a policy approaches
when load times are alike: the models in order of popularity per byte, as many as fit (under
the independent reference model no policy that does not know the future holds better ones in
steady state).

Pure functions of numbers; the CLI (``inferd plan --models``) prints them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "MAX_LOAD_SHARE",
    "CacheEstimate",
    "ModelFleet",
    "PodsRow",
    "che_hit_ratio",
    "estimate_cache",
    "plan_pods",
    "replicated",
    "sharded",
    "size_aware_hit_ratio",
    "zipf_popularity",
]

Floats = npt.NDArray[np.float64]

#: a pod loading for more than this share of its time queues its misses behind each other
MAX_LOAD_SHARE = 0.5


def zipf_popularity(models: int, s: float) -> Floats:
    """Request probabilities of ``models`` models ranked by popularity: ``p_i ~ 1 / i**s``."""
    if models < 1:
        raise ValueError("the number of models must be at least 1")
    if s < 0:
        raise ValueError("the Zipf exponent must be >= 0")
    weights = np.arange(1, models + 1, dtype=np.float64) ** -s
    popularity: Floats = weights / weights.sum()
    return popularity


@dataclass(frozen=True, slots=True)
class CacheEstimate:
    """Che's approximation of one LRU cache."""

    hit_ratio: float  # of the requests this cache receives
    characteristic_time: float  # in requests to this cache; inf: everything fits
    resident_models: float  # expected number of models held
    too_big: int  # models larger than the whole capacity: never held


def che_hit_ratio(popularity: Floats, sizes: Floats, capacity: float) -> CacheEstimate:
    """The hit ratio of an LRU cache of ``capacity`` bytes under the independent reference
    model: ``popularity`` (sums to 1) and ``sizes`` (bytes) per model."""
    p = np.asarray(popularity, dtype=np.float64)
    s = np.asarray(sizes, dtype=np.float64)
    if p.shape != s.shape:
        raise ValueError("one size per model")
    total = float(p.sum())
    if total <= 0:
        return CacheEstimate(0.0, 0.0, 0.0, 0)
    p = p / total
    fits = s <= capacity
    too_big = int((~fits).sum())
    p_in, s_in = p[fits], s[fits]
    if float(s_in.sum()) <= capacity:  # every model that fits at all fits together
        return CacheEstimate(float(p_in.sum()), math.inf, float(len(s_in)), too_big)

    def held(t: float) -> float:
        return float((s_in * -np.expm1(-p_in * t)).sum())

    low, high = 0.0, 1.0
    while held(high) < capacity:
        high *= 2.0
    for _ in range(200):  # bisection: held(t) grows with t
        mid = (low + high) / 2.0
        if held(mid) < capacity:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * high:
            break
    t = (low + high) / 2.0
    resident = -np.expm1(-p_in * t)
    return CacheEstimate(float((p_in * resident).sum()), t, float(resident.sum()), too_big)


def size_aware_hit_ratio(popularity: Floats, sizes: Floats, capacity: float) -> CacheEstimate:
    """The hit ratio of a cache of ``capacity`` bytes that holds the models of most requests
    per byte: in order of ``popularity / size``, each that still fits (``characteristic_time``
    is not defined: nan)."""
    p = np.asarray(popularity, dtype=np.float64)
    s = np.asarray(sizes, dtype=np.float64)
    if p.shape != s.shape:
        raise ValueError("one size per model")
    total = float(p.sum())
    if total <= 0:
        return CacheEstimate(0.0, math.nan, 0.0, 0)
    p = p / total
    too_big = int((s > capacity).sum())
    order = np.argsort(-p / np.maximum(s, 1.0), kind="stable")
    room, hits, held = float(capacity), 0.0, 0
    for i in order.tolist():
        if s[i] <= room:
            room -= float(s[i])
            hits += float(p[i])
            held += 1
    return CacheEstimate(hits, math.nan, float(held), too_big)


def estimate_cache(
    popularity: Floats, sizes: Floats, capacity: float, policy: str = "lru"
) -> CacheEstimate:
    """One pod's cache under ``--model-eviction policy``: ``lru`` by Che's approximation,
    ``cost`` by its size-aware ceiling."""
    if policy == "cost":
        return size_aware_hit_ratio(popularity, sizes, capacity)
    if policy != "lru":
        raise ValueError(f"unknown eviction policy {policy!r}")
    return che_hit_ratio(popularity, sizes, capacity)


@dataclass(frozen=True, slots=True)
class ModelFleet:
    """What ``inferd plan --models`` is given."""

    sizes: Floats  # bytes per model, most popular first
    popularity: Floats  # request probabilities, most popular first (sums to 1)
    room_bytes: float  # a pod's budget less the server's own share
    rate_rps: float | None = None  # requests per second, all models together
    load_s: float | None = None  # one cold load's duration
    policy: str = "lru"  # each pod's --model-eviction


@dataclass(frozen=True, slots=True)
class PodsRow:
    pods: int
    hit_ratio: float  # over all requests
    resident_models: float  # on the busiest pod
    too_big: int  # models no pod can hold
    loads_per_s: float | None  # on the busiest pod (misses)
    load_share: float | None  # of the busiest pod's time spent loading

    def meets(self, target: float) -> bool:
        return self.hit_ratio >= target and (
            self.load_share is None or self.load_share <= MAX_LOAD_SHARE
        )


def sharded(fleet: ModelFleet, pods: int) -> PodsRow:
    """``pods`` pods, each model's requests sent to one pod (models dealt by rank)."""
    hits, busiest_loads, busiest_share, resident = 0.0, 0.0, 0.0, 0.0
    too_big = 0
    for pod in range(pods):
        p, s = fleet.popularity[pod::pods], fleet.sizes[pod::pods]
        share = float(p.sum())
        if share <= 0:
            continue
        estimate = estimate_cache(p, s, fleet.room_bytes, fleet.policy)
        hits += share * estimate.hit_ratio
        too_big += estimate.too_big
        resident = max(resident, estimate.resident_models)
        if fleet.rate_rps is not None:
            loads = fleet.rate_rps * share * (1.0 - estimate.hit_ratio)
            busiest_loads = max(busiest_loads, loads)
            if fleet.load_s is not None:
                busiest_share = max(busiest_share, loads * fleet.load_s)
    return PodsRow(
        pods,
        hits,
        resident,
        too_big,
        busiest_loads if fleet.rate_rps is not None else None,
        busiest_share if fleet.rate_rps is not None and fleet.load_s is not None else None,
    )


def replicated(fleet: ModelFleet, pods: int) -> PodsRow:
    """``pods`` pods each serving every model, requests spread evenly."""
    estimate = estimate_cache(fleet.popularity, fleet.sizes, fleet.room_bytes, fleet.policy)
    loads = share = None
    if fleet.rate_rps is not None:
        loads = fleet.rate_rps / pods * (1.0 - estimate.hit_ratio)
        if fleet.load_s is not None:
            share = loads * fleet.load_s
    return PodsRow(
        pods, estimate.hit_ratio, estimate.resident_models, estimate.too_big, loads, share
    )


def plan_pods(
    fleet: ModelFleet, target_hit_ratio: float, max_pods: int
) -> tuple[list[PodsRow], int | None]:
    """Sharded rows for 1, 2, 4... pods up to the fewest that meet ``target_hit_ratio`` (and
    spend at most :data:`MAX_LOAD_SHARE` of their time loading when a rate and a load time are
    given), and that number (None: not within ``max_pods``)."""
    rows: dict[int, PodsRow] = {}

    def row(pods: int) -> PodsRow:
        if pods not in rows:
            rows[pods] = sharded(fleet, pods)
        return rows[pods]

    pods = 1
    while not row(pods).meets(target_hit_ratio):
        if pods >= max_pods:
            return [rows[k] for k in sorted(rows)], None
        pods = min(pods * 2, max_pods)
    # the fewest between the last miss and the first that meets (hit ratios grow with pods)
    low, high = pods // 2, pods
    while high - low > 1:
        mid = (low + high) // 2
        if row(mid).meets(target_hit_ratio):
            high = mid
        else:
            low = mid
    return [rows[k] for k in sorted(rows)], high
