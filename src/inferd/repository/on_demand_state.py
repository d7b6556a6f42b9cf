"""The on-demand loader's settings, what it keeps per model, its statistics, the size
estimates of a load (pure functions of what it measured), and the large loads' turns."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import statistics
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field

from inferd.core.statistics import Histogram
from inferd.errors import UnavailableError

__all__ = [
    "ALONE_LOADS",
    "LOAD_SECONDS_BUCKETS",
    "RATIO_SAMPLES",
    "SIZE_SAMPLES",
    "TRIM_SLACK_BYTES",
    "Counters",
    "LargeLoads",
    "ModelRecord",
    "OnDemandSettings",
    "OnDemandStats",
    "eviction_reason",
    "first_estimate",
    "index_details",
    "model_size",
    "no_room_refusal",
    "plausible_free",
    "read_outcome",
    "size_source",
    "transient_estimate",
    "transient_measured",
    "wait_refusal",
]

LOAD_SECONDS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SIZE_SAMPLES = 3  # a model's size: the median of its last loads' measured growths
#: a large model's loads that run alone (no other load beside them) until its transient peak
#: is measured: one suffices unless an unload or a trim spoils the reading
ALONE_LOADS = 2
#: a model whose transient is unknown: its runtime's median transient / size over this many
#: recent loads that ran alone (one outlier, a load that overlapped a request's buffers, does
#: not set every later estimate)
RATIO_SAMPLES = 15
#: an unload's drop above this many times the model's load growth or files is not its own
FREED_PLAUSIBLE = 4
#: an unload skips the trim before it when the resident set is this close to what the last trim
#: left (16 pages): nothing the allocator kept since would be counted in the victim's drop
TRIM_SLACK_BYTES = 64 * 1024
_SIMILAR = math.log(1.25)  # files' sizes this close: a model never loaded is sized like the other

_log = logging.getLogger("inferd.repository")


class LargeLoads:
    """Loads of models larger than ``1 / divisor`` of the room (what the budget leaves for
    models) take turns: each waits, before it takes a load thread, until no other such load
    is under way. Two at once need room for both, and unload most small models to make it;
    one after the other, the second can take the place of the first once its requests are
    served."""

    def __init__(self, divisor: int = 4) -> None:
        self.divisor = divisor
        self._lock = asyncio.Lock()
        self._loading = ""  # the large load under way

    def is_large(self, size: int, room: int) -> bool:
        return size * self.divisor > room

    def plan(
        self,
        name: str,
        model: ModelRecord,
        size: int,
        room: int | None,
        records: Iterable[ModelRecord],
        measurable: bool = True,
    ) -> tuple[contextlib.AbstractAsyncContextManager[object], bool]:
        """What ``name``'s load waits for before a load thread (its turn if it is large), and
        whether it runs alone: a large model's first loads (up to :data:`ALONE_LOADS`) until
        its transient peak, or a copy's, is measured. Beside other loads its peak is not its
        own, and carried over from small models' ratios it asks for more than the whole room
        (a shared-weights MiniLM copy: 500 MiB for a peak of 0-14 MiB above its 178 MiB).
        ``measurable``: whether a peak can be read at all (else no load runs alone)."""
        if room is None or not self.is_large(size, room):
            return contextlib.nullcontext(), False
        alone = (
            measurable
            and model.alone_loads < ALONE_LOADS
            and not transient_measured(model, records)
        )
        model.alone_loads += alone
        return self.turn(name), alone

    @contextlib.asynccontextmanager
    async def turn(self, name: str) -> AsyncIterator[None]:
        if self._lock.locked():
            _log.info(
                "model '%s' waits for the load of '%s' to end: models larger than 1/%d of the "
                "room the budget leaves for models load one at a time",
                name,
                self._loading,
                self.divisor,
            )
        async with self._lock:
            self._loading = name
            try:
                yield
            finally:
                self._loading = ""


@dataclass(frozen=True, slots=True)
class OnDemandSettings:
    budget_bytes: int | None = None  # None: load on demand, never evict
    pins: frozenset[str] = frozenset()
    min_residency_s: float = 10.0
    wait_s: float = 30.0
    load_retry_s: float = 10.0  # after a failed load, its error answers requests this long
    eviction: str = "cost"  # which idle models leave first: lru | cost (eviction.POLICIES)
    load_threads: int = 4  # loads of different models at the same time
    # how often the resident set is measured against the budget between loads (0: only at
    # loads); over it, the allocator is trimmed, then idle models leave
    watch_s: float = 0.25


@dataclass(slots=True)
class ModelRecord:
    size_bytes: int = 0
    measured: list[int] = field(default_factory=list)  # its last loads' growths, newest last
    freed: list[int] = field(default_factory=list)  # what its last unloads gave back, newest last
    transient_bytes: int | None = None  # how far a load of it rose above its end (None: unknown)
    runtime: str = ""  # its runtime, once loaded
    libraries: bool = False  # its first load was its runtime's: its growth held the libraries
    on_disk: int = 0  # its files' size, at its last load
    loaded_at_s: float = 0.0
    last_used_s: float = 0.0
    heat: float = 0.0  # requests decayed by age, as of last_used_s (kept across evictions)
    reload_s: float = 0.0  # its last load's duration
    evicted_s: float = -math.inf  # when it was last evicted (the loader's clock)
    reloaded_after_s: float = math.inf  # how long after its last eviction its last load came
    loads: int = 0
    alone_loads: int = 0  # loads it ran alone for, to measure its transient peak
    evicted_at: str = ""  # ISO 8601, UTC
    evicted_reason: str = ""
    too_big: str = ""  # the refusal, once the model is known to exceed the budget
    failed: str = ""  # the error of its last load, when that load failed
    failed_at_s: float = 0.0


@dataclass(frozen=True, slots=True)
class OnDemandStats:
    """A snapshot for the metrics collector."""

    budget_bytes: int | None
    baseline_bytes: int
    resident_bytes: dict[str, int]
    loads: dict[str, int]  # by reason: startup, first_request, after_eviction
    evictions: int
    thrash_refusals: int
    load_seconds: dict[str, Histogram]  # by runtime
    deferrals: int = 0  # loads that waited for a busy model to become the cheaper victim
    loading_bytes: int = 0  # reserved by loads under way
    peak_parallel_loads: int = 0  # the most loads that ran at the same time


@dataclass(slots=True)
class Counters:
    loads: dict[str, int] = field(default_factory=dict)
    evictions: int = 0
    thrash_refusals: int = 0
    deferrals: int = 0
    load_seconds: dict[str, Histogram] = field(default_factory=dict)
    peak_parallel_loads: int = 0

    def loaded(self, reason: str, runtime: str, seconds: float) -> None:
        """A load for ``reason`` of a ``runtime`` model took ``seconds``."""
        self.loads[reason] = self.loads.get(reason, 0) + 1
        histogram = self.load_seconds.get(runtime)
        if histogram is None:
            histogram = self.load_seconds[runtime] = Histogram.with_bounds(LOAD_SECONDS_BUCKETS)
        histogram.observe(seconds)

    def snapshot(
        self, budget: int | None, baseline: int, loaded: Mapping[str, ModelRecord], reserved: int
    ) -> OnDemandStats:
        """The metrics' view: ``loaded``, the loaded models' records; ``reserved``, the bytes
        loads under way reserved."""
        return OnDemandStats(
            budget_bytes=budget,
            baseline_bytes=baseline,
            resident_bytes={name: m.size_bytes for name, m in loaded.items()},
            loads=dict(self.loads),
            evictions=self.evictions,
            thrash_refusals=self.thrash_refusals,
            deferrals=self.deferrals,
            load_seconds={k: h.copy() for k, h in self.load_seconds.items()},
            loading_bytes=reserved,
            peak_parallel_loads=self.peak_parallel_loads,
        )


def eviction_reason(when: str, for_name: str, policy: str) -> str:
    """What the repository index shows for a model evicted at ``when`` (ISO 8601) to make
    room for ``for_name`` (empty: by the memory watch)."""
    rule = "least recently used" if policy == "lru" else "least worth keeping"
    why = (
        f"to make room for '{for_name}' within the memory budget"
        if for_name
        else "as the server's resident set exceeded the memory budget"
    )
    return f"evicted at {when} {why} ({rule}, idle); loads again on its next request"


def first_estimate(records: Iterable[ModelRecord], on_disk: int) -> int:
    """The size of a model never loaded: its files' size times the ratio of size to files
    of the measured model whose files' size is closest to its own, within a quarter (a
    copy of a model, another fine-tune of one architecture); else its files' size. A model
    measured once counts unless that load was its runtime's first (its growth then held the
    runtime's libraries): a MiniLM copy holds twice its files' size, and copies loading
    before any had loaded twice were admitted at half their size."""
    best: tuple[float, float] | None = None
    for other in records:
        if other.loads < 1 or (other.loads < 2 and other.libraries):
            continue
        distance = _disk_distance(other.on_disk, on_disk)
        if distance is not None and (best is None or distance < best[0]):
            best = (distance, other.size_bytes / other.on_disk)
    return on_disk if best is None else max(on_disk, round(on_disk * best[1]))


def _disk_distance(a: int, b: int) -> float | None:
    """How far apart two models' files' sizes are (log ratio), if within a quarter (alike
    enough to size one like the other); None otherwise or when either is unknown."""
    if a <= 0 or b <= 0:
        return None
    distance = abs(math.log(a / b))
    return distance if distance <= _SIMILAR else None


def transient_estimate(
    model: ModelRecord, size: int, ratios: Mapping[str, float], records: Iterable[ModelRecord]
) -> int:
    """How far a load of ``model`` may rise above its size: as measured at its last load
    that ran alone; else as the measured models within a quarter of it on disk (copies of
    it: a 90 MB encoder's transient is not a 2 MB model's times 45); else as the
    ratio its runtime's models showed (``ratios``: their median; any runtime's before its
    first load); else 0 (nothing measured yet)."""
    if model.transient_bytes is not None:
        return model.transient_bytes
    copies = _copies_ratios(model, records)
    if copies:  # the largest ratio among them: copies' peaks vary
        return round(max(copies) * size)
    ratio = ratios.get(model.runtime) if model.runtime else max(ratios.values(), default=0.0)
    return round((ratio or 0.0) * size)


def transient_measured(model: ModelRecord, records: Iterable[ModelRecord]) -> bool:
    """Whether :func:`transient_estimate` reads ``model``'s own peak or a copy's, rather than
    carry other models' ratio over to it."""
    return model.transient_bytes is not None or bool(_copies_ratios(model, records))


def _copies_ratios(model: ModelRecord, records: Iterable[ModelRecord]) -> list[float]:
    """Transient / size of the measured models within a quarter of ``model`` on disk."""
    return [
        other.transient_bytes / max(1, other.size_bytes)
        for other in records
        if other.transient_bytes is not None
        and _disk_distance(other.on_disk, model.on_disk) is not None
    ]


def index_details(
    model: ModelRecord | None, loading: bool, loaded: bool, pinned: bool
) -> tuple[tuple[str, str], ...]:
    """Extra fields of an on-demand model's repository-index rows."""
    if loading:
        state = "loading"
    elif loaded:
        state = "resident"
    elif model is not None and model.too_big:
        state = "too_big"
    else:
        state = "available"
    rows: list[tuple[str, str]] = [("on_demand", state)]
    if pinned:
        rows.append(("pinned", "true"))
    if model is not None and model.size_bytes:
        rows.append(("memory_bytes", str(model.size_bytes)))
    if model is not None and model.evicted_at and not loaded:
        rows.append(("evicted_at", model.evicted_at))
    return tuple(rows)


def backoff_refusal(
    name: str, model: ModelRecord | None, now: float, settings: OnDemandSettings
) -> str:
    """The remembered error while a failed load's back-off lasts ("" once it is over)."""
    if model is None or not model.failed:
        return ""
    retry_s = settings.load_retry_s
    ago = now - model.failed_at_s
    if ago >= retry_s:
        return ""
    return (
        f"{model.failed} (model '{name}' failed to load {ago:.1f} s ago; its load is tried "
        f"again on a request after {retry_s - ago:.1f} s, --model-load-retry-secs)"
    )


def too_big_refusal(
    name: str, size: int, how: str, settings: OnDemandSettings, baseline: int
) -> str:
    """Why a model whose size alone exceeds what the budget leaves for models is refused."""
    budget = settings.budget_bytes or 0
    return (
        f"model '{name}' needs {size} bytes ({how}), more than the memory budget of {budget} "
        f"bytes leaves for models ({budget - baseline} bytes once the server's own {baseline} "
        "bytes are counted): raise --model-memory-budget to serve it"
    )


def no_room_refusal(name: str, over: int, baseline: int, settings: OnDemandSettings) -> str:
    """Why a load cannot make room now (``over``: what the process holds beyond its models,
    its baseline and the loads under way)."""
    held = (
        f" (the process holds {over} bytes beyond its models, its own {baseline} bytes and the "
        "loads under way)"
        if over
        else ""
    )
    return (
        f"model '{name}' cannot load now: the memory budget is held by models with requests in "
        f"flight, pinned, or loaded less than {settings.min_residency_s:g} s ago{held}; retry "
        "later"
    )


def size_source(model: ModelRecord, size: int) -> str:
    """Where a load's expected ``size`` came from (see ``OnDemandLoader._expected_size``)."""
    if model.loads:
        return "measured at an earlier load"
    if size == model.on_disk:
        return "on disk"
    return "estimated from a measured model of a similar size on disk"


def model_size(model: ModelRecord) -> int:
    """A model's size: the median of what its last unloads gave back, measured around the
    unload alone (milliseconds, few other changes meanwhile; and exactly the room an eviction
    makes); before its first unload, the median of its loads' growths (a load takes long
    enough for requests, other loads and frees to move the resident set by as much as the
    model itself); at least its files' size."""
    samples = model.freed or model.measured
    return max(int(statistics.median(samples)) if samples else 0, model.on_disk)


def plausible_free(model: ModelRecord, freed: int) -> bool:
    """Whether an unload's measured drop can be the model's own: at most
    :data:`FREED_PLAUSIBLE` times what its loads grew (their median) or its files' size. A
    drop far beyond that is memory something else gave back in the same milliseconds (a
    model torn down late by the garbage collector, a request's buffers): a 0.7 MB model once
    measured 155 MB, and would have reserved that at each of its loads."""
    grown = int(statistics.median(model.measured)) if model.measured else 0
    return freed <= FREED_PLAUSIBLE * max(grown, model.on_disk, 1)


def wait_refusal(
    name: str, load: asyncio.Future[None], no_room: str | None, wait_s: float
) -> BaseException:
    """Why a request waited ``wait_s`` for the model's ``load`` in vain: the load's failure if
    it failed as the wait ran out, else why it still waits for room (``no_room``), else that
    it is still loading."""
    failure = load.exception() if load.done() and not load.cancelled() else None
    if failure is not None:
        return failure
    if no_room is not None:
        return UnavailableError(no_room)
    return UnavailableError(
        f"model '{name}' is loading on demand and was not ready within {wait_s:g} s; retry shortly"
    )


def read_outcome(fut: asyncio.Future[None]) -> None:
    """A load nobody waits for any more still has its outcome read (no asyncio warning)."""
    if not fut.cancelled():
        fut.exception()
