"""Load models on demand within a memory budget, unloading idle ones to make room.

The repository manager owns the models; this loader decides when one loads and which leave:

- **one load per model**: the first request for a model that is not loaded starts its load;
  later requests join it. Each waits at most ``wait_s``, then fails with a 503 that says the
  model is loading (the load goes on; the next request joins it or finds the model READY);
- **parallel loads, bounded**: at most ``load_threads`` (``--model-load-thread-count``), the
  waiting load whose model loses most requests per second of loading first
  (:class:`~inferd.repository.load_gate.LoadGate`); each reserves its estimated size before it
  starts, so two loads never count on the same free bytes; a model being loaded (or unloaded)
  is never chosen for eviction. Growth measured while loads overlap is split among them;
- **large loads one at a time** (:class:`~inferd.repository.on_demand_state.LargeLoads`): a
  model larger than a quarter of what the budget leaves for models waits, without holding a
  load thread, until no other such load is under way; until its transient peak is measured,
  it runs alone (no other load beside it), so that the peak read is its own;
- **room first**: with a budget, :func:`inferd.repository.eviction.choose_victims` names the
  idle models to unload (``eviction``: ``lru``, the least recently used first, or ``cost``, the
  least worth keeping per byte first: recent requests x reload time / size; never one with
  requests in flight, pinned, or loaded less than ``min_residency_s`` ago). While no choice
  makes room the load waits (up to ``wait_s``), then fails its waiters;
- **back-off**: a failed load's error answers the model's requests (503) for ``load_retry_s``;
- **sizes**: measured at loads and unloads (:func:`~inferd.repository.on_demand_state.model_size`);
  a load also reserves its transient peak
  (:class:`~inferd.repository.load_peaks.LoadPeaks`). The budget holds the server's own
  baseline (its resident set before the first on-demand load) and whatever else the process
  holds, measured before each load and every ``watch_s`` between loads
  (:func:`~inferd.repository.on_demand_watch.watch_memory`): admission compares the budget
  with the measured resident set, not only with the sizes. A model whose size alone exceeds
  what the budget leaves for models is refused with a message saying so (and unloaded if it
  was loaded to find out).

A failed load fails only its own waiters; the warm-up the model's config asks for runs inside
the load, before any waiter is served.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping

from inferd.core.clock import Clock, SystemClock
from inferd.errors import InferdError, UnavailableError
from inferd.repository.eviction import (
    DEFER_MAX_S,
    Choice,
    EvictionConfig,
    Resident,
    cheaper_when_idle,
    choose_victims,
    decayed_heat,
)
from inferd.repository.load_gate import LoadGate
from inferd.repository.load_peaks import LoadPeaks
from inferd.repository.memory import (
    GrowthShares,
    PeakMeter,
    ProcessTree,
    release_free_memory,
)
from inferd.repository.on_demand_state import (
    LOAD_SECONDS_BUCKETS,
    SIZE_SAMPLES,
    TRIM_SLACK_BYTES,
    Counters,
    LargeLoads,
    ModelRecord,
    OnDemandSettings,
    OnDemandStats,
    backoff_refusal,
    eviction_reason,
    first_estimate,
    index_details,
    model_size,
    no_room_refusal,
    plausible_free,
    read_outcome,
    size_source,
    too_big_refusal,
    wait_refusal,
)
from inferd.repository.on_demand_watch import watch_memory

_log = logging.getLogger("inferd.repository")

__all__ = ["LOAD_SECONDS_BUCKETS", "OnDemandLoader", "OnDemandSettings", "OnDemandStats"]

_ROOM_RETRY_S = 0.02  # how often a load waiting for room looks again


class OnDemandLoader:
    """Loads models on first use and unloads idle ones to stay within the budget.

    ``load(name)`` loads the model (warmed up) and returns its runtime's name;
    ``unload(name, reason)`` unloads it, the reason shown in the repository index;
    ``loaded()`` maps each loaded model to its requests in flight; ``estimate(name)`` is its
    size on disk.
    """

    def __init__(
        self,
        settings: OnDemandSettings,
        *,
        load: Callable[[str], Awaitable[str]],
        unload: Callable[[str, str], Awaitable[None]],
        loaded: Callable[[], dict[str, int]],
        estimate: Callable[[str], Awaitable[int]],
        measure: Callable[[], int] | None = None,
        release: Callable[[], None] = release_free_memory,
        clock: Clock | None = None,
        peak: PeakMeter | None = None,
    ) -> None:
        self.settings = settings
        self._load = load
        self._unload = unload
        self._loaded = loaded
        self._estimate = estimate
        self._measure = measure if measure is not None else ProcessTree().rss
        self._release = release
        # loads' transient peaks, read where this process's own resident set is measured
        meter = peak if peak is not None or measure is not None else PeakMeter()
        self._peaks = LoadPeaks(meter)
        self._clock = clock if clock is not None else SystemClock()
        self._models: dict[str, ModelRecord] = {}
        self._loading: dict[str, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._gate = LoadGate(settings.load_threads, self._demand, settings.wait_s / 10)
        self._large = LargeLoads()
        self._reserved: dict[str, int] = {}  # loads under way: their estimated sizes
        self._evicting: set[str] = set()  # models being unloaded: counted, not chosen again
        self._active = 0  # loads running now
        # requests waiting on a model's load: once it is loaded, they count as in flight until
        # they resume, so another load cannot evict the model before its requests reach it
        self._waiting: dict[str, int] = {}
        self._shares = GrowthShares()
        self._measuring = asyncio.Lock()  # one measurement at a time, applied in order
        self._trimmed_rss = -1  # the resident set measured just after the last trim
        self._no_room: dict[str, str] = {}  # loads waiting for room: why
        self._room_until: dict[str, float] = {}  # a load waiting for room: until when (loop time)
        self._counters = Counters()
        self.baseline_bytes = 0
        self._cfg = EvictionConfig(settings.min_residency_s, settings.eviction)

    def _now(self) -> float:
        return self._clock.monotonic_ns() / 1e9

    async def start(self) -> None:
        """Measure the server's baseline (before any model loads); with a budget, start
        watching the resident set between loads."""
        self.baseline_bytes = await asyncio.to_thread(self._measure)
        if self.settings.budget_bytes is not None and self.settings.watch_s > 0:
            watch = watch_memory(self, self.settings.watch_s)
            task = asyncio.create_task(watch, name="inferd-memory-watch")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def over_budget(self) -> tuple[int, int]:
        """Measured now: the bytes the process exceeds the budget by, and beyond its models."""
        room = self._room()
        assert room is not None
        unaccounted = await self._unaccounted()
        return self._over(room, unaccounted), unaccounted

    async def give_back(self) -> None:
        self._peaks.spoil()  # what the trim gives back would read as a load's transient
        async with self._measuring:  # what the trim gives back is no load's
            await self._trim_measured()
            self._shares.rebase(self._trimmed_rss)

    async def _trim_measured(self) -> None:
        """Hand free memory back to the system (under ``_measuring``), measured around it."""
        self._shares.observe(await asyncio.to_thread(self._measure))
        await asyncio.to_thread(self._release)
        self._trimmed_rss = await asyncio.to_thread(self._measure)

    def choose_for_watch(self, unaccounted: int) -> Choice:
        room = self._room()
        assert room is not None
        free = room - self._grown() - unaccounted + self._leaving()
        return choose_victims(self.residents(), 0, free, self._now(), self._cfg, partial=True)

    async def evict_all(self, victims: list[str], for_name: str) -> None:
        # marked before any await: no other load picks the same victims
        self._evicting.update(victims)
        try:
            for victim in victims:
                await self._evict(victim, for_name)
        finally:
            self._evicting.difference_update(victims)

    def _grown(self) -> int:
        """What the loads under way have grown the resident set by so far."""
        return round(sum(max(0.0, g) for g in self._shares.shares.values()))

    def _over(self, room: int, unaccounted: int) -> int:
        """Bytes the measured resident set exceeds the budget by: the resident models, the loads
        under way as grown so far (not as reserved) and ``unaccounted``."""
        return sum(r.size_bytes for r in self.residents()) + self._grown() + unaccounted - room

    async def preload(
        self, wanted: Iterable[str], known: Collection[str], problems: Mapping[str, str]
    ) -> dict[str, str]:
        """Load ``wanted`` (``*``: every ``known`` model) and the pinned models at start, one
        after another; the failures by model name."""
        names = set(known) if "*" in wanted else set(wanted)
        failures: dict[str, str] = {}
        for name in sorted(names | self.settings.pins):
            if name not in known:
                failures[name] = f"no model directory named '{name}' in the model repository"
            elif name in problems:
                failures[name] = problems[name]
            else:
                try:
                    await self.ensure(name, reason="startup")
                except InferdError as exc:
                    failures[name] = str(exc)
        return failures

    def touch(self, name: str) -> None:
        """A request used the model now (its recency and heat for the eviction policy)."""
        model = self._models.get(name)
        if model is not None:
            now = self._now()
            since = now - model.last_used_s
            model.heat = decayed_heat(model.heat, since, self._cfg.heat_half_life_s) + 1.0
            model.last_used_s = now

    # -- loading -------------------------------------------------------------------------------

    async def ensure(self, name: str, *, reason: str = "") -> None:
        """Return once ``name`` is loaded: start its load or join the one under way; wait at
        most ``wait_s`` (then a 503 says the model is loading)."""
        fut = self._loading.get(name)
        if fut is None and name not in self._evicting and name in self._loaded():
            # loaded meanwhile: a second load queued behind the load threads would hold its
            # waiters, counted in flight on a resident model that then cannot make room
            return
        if fut is None:
            # a failed load's error answers for its back-off: a broken model is not reloaded
            refusal = backoff_refusal(name, self._models.get(name), self._now(), self.settings)
            if refusal:
                raise UnavailableError(refusal)
            fut = asyncio.get_running_loop().create_future()
            fut.add_done_callback(read_outcome)
            self._loading[name] = fut
            task = asyncio.create_task(self._run(name, fut, reason), name=f"inferd-load-{name}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # a load waiting for room waits as long as its latest request may: one that joins late
        # does not fail with the first request's deadline
        until = asyncio.get_running_loop().time() + self.settings.wait_s
        self._room_until[name] = max(until, self._room_until.get(name, until))
        self._waiting[name] = self._waiting.get(name, 0) + 1
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.settings.wait_s)
        except TimeoutError:
            raise wait_refusal(name, fut, self._no_room.get(name), self.settings.wait_s) from None
        finally:
            left = self._waiting.pop(name, 1) - 1
            if left:
                self._waiting[name] = left

    def loading(self) -> list[str]:
        return sorted(self._loading)

    async def _run(self, name: str, fut: asyncio.Future[None], reason: str) -> None:
        try:
            turn, alone = await self._turn(name)
            async with turn, self._gate.slot(name, alone=alone):
                if name not in self._loaded():
                    await self._load_one(name, reason)
        except asyncio.CancelledError:  # the server is stopping
            if not fut.done():
                fut.set_exception(
                    UnavailableError(f"model '{name}' was loading when the server stopped")
                )
            raise
        except BaseException as exc:
            if not fut.done():
                fut.set_exception(exc)
        else:
            if not fut.done():
                fut.set_result(None)
        finally:
            self._loading.pop(name, None)
            self._room_until.pop(name, None)
            self._reserved.pop(name, None)

    def _room(self) -> int | None:
        budget = self.settings.budget_bytes
        return None if budget is None else budget - self.baseline_bytes

    async def _expected_size(self, name: str, *, fresh: bool = True) -> tuple[ModelRecord, int]:
        """The model's record and the size its load is expected to add (``fresh``: its files
        measured again, else as at its last load where known: a repository scan each)."""
        model = self._models.setdefault(name, ModelRecord())
        if fresh or not model.on_disk:
            model.on_disk = await self._estimate(name)
        if model.loads:
            return model, max(model.size_bytes, model.on_disk)
        return model, first_estimate(self._models.values(), model.on_disk)

    async def _turn(self, name: str) -> tuple[contextlib.AbstractAsyncContextManager[object], bool]:
        """What the load waits for before a load thread, and whether it runs alone."""
        model, size = await self._expected_size(name, fresh=False)
        room, measurable = self._room(), self._peaks.measurable
        return self._large.plan(name, model, size, room, self._models.values(), measurable)

    async def _load_one(self, name: str, reason: str) -> None:
        model, size = await self._expected_size(name)
        if model.too_big:
            raise UnavailableError(model.too_big)
        # what the load holds at its peak: its size and how far an earlier load of it rose
        # above its end (reading the files, building the session, the warm-up's buffers)
        need = size + self._transient(model, size)
        room = self._room()
        asked = self._now()
        if room is not None:
            if size > room:
                how = size_source(model, size)
                model.too_big = too_big_refusal(name, size, how, self.settings, self.baseline_bytes)
                raise UnavailableError(model.too_big)
            need = min(need, room)
            await self._make_room(name, need, size, room)  # reserves what fits
        else:
            self._reserved[name] = need
        reason = reason or ("after_eviction" if model.loads else "first_request")
        async with self._measuring:
            self._shares.begin(name, size, await asyncio.to_thread(self._measure))
        self._peaks.begin(name)
        self._active = active = self._active + 1
        counters = self._counters
        counters.peak_parallel_loads = max(counters.peak_parallel_loads, active)
        _log.info(
            "model '%s' loading on demand (%s, %d loads under way, %d waiting; %d of %d bytes "
            "reserved after %.2f s for room)",
            name,
            reason,
            active,
            len(self._loading) - active,  # for a load thread or for room
            self._reserved.get(name, 0),
            need,
            self._now() - asked,
        )
        started = self._now()
        rise: int | None = None
        try:
            runtime = await self._load(name)
        except Exception as exc:
            model.failed, model.failed_at_s = str(exc), self._now()
            raise
        finally:
            # what the load freed (files read, build and warm-up buffers) goes back before its
            # growth is measured: kept by the allocator, it would count as the model's
            async with self._measuring:
                await self._trim_measured()
                self._shares.charge(name, self._trimmed_rss)
            rise = self._peaks.end(name)
            self._active -= 1
            async with self._measuring:
                grown = self._shares.end(name, await asyncio.to_thread(self._measure))
        model.failed = ""
        elapsed = self._now() - started
        # the median of its last few loads (one load's growth is noisy, the largest only ever
        # grows); what a size misses, the measured admission (_unaccounted) counts
        model.measured = [*model.measured, grown][-SIZE_SAMPLES:]
        model.size_bytes = model_size(model)
        model.libraries |= not any(m.runtime == runtime for m in self._models.values())
        model.runtime = runtime
        self._peaks.record(model, runtime, rise)
        model.loads += 1
        counters.loaded(reason, runtime, elapsed)
        now = self._now()
        model.heat = decayed_heat(model.heat, now - model.last_used_s, self._cfg.heat_half_life_s)
        model.reload_s = elapsed
        model.loaded_at_s = model.last_used_s = now
        model.reloaded_after_s = started - model.evicted_s  # the policy's thrash: small
        model.evicted_at = model.evicted_reason = ""
        self._reserved.pop(name, None)  # from now on counted at its measured size
        _log.info(
            "model '%s' loaded on demand in %.3f s (%s, %d bytes%s)",
            name,
            elapsed,
            runtime,
            model.size_bytes,
            "" if rise is None else f", {model.transient_bytes} bytes more at its peak",
        )
        if room is not None and model.size_bytes > room:
            model.too_big = too_big_refusal(
                name, model.size_bytes, "measured at its load", self.settings, self.baseline_bytes
            )
            await self._unload(name, model.too_big)
            raise UnavailableError(model.too_big)
        if room is not None:
            await self._trim(name, room - model.size_bytes)

    async def _trim(self, name: str, room: int) -> None:
        """After a load that measured more than its estimate: unload idle models until the
        others fit in ``room`` again (or say why they cannot yet)."""
        over = await self._unaccounted()
        free = room - self._reserved_by_others(name) - over + self._leaving()
        choice = self._choose(self.residents(exclude=name), 0, free)
        if not choice.fits:
            _log.warning(
                "model '%s' measured more than its estimate: resident models exceed the memory "
                "budget until idle ones can be unloaded",
                name,
            )
            return
        await self.evict_all(choice.victims, name)

    async def _make_room(self, name: str, need: int, size: int, room: int) -> None:
        """Unload idle models until the load fits (its size and transient peak, ``need``; its
        size alone when the peak cannot fit now), then reserve that; wait while it cannot."""
        loop = asyncio.get_running_loop()
        fallback = loop.time() + self.settings.wait_s
        # how long it may wait for a busy model that would be a cheaper victim once idle
        defer_until = loop.time() + min(DEFER_MAX_S, self._models[name].reload_s or DEFER_MAX_S)
        counted = deferred = False
        try:
            while True:
                # the resident set as measured, not only as accounted: memory that unloads
                # have not given back yet, loads' transient peaks and the server's own growth
                # count too; measured again after each unload, until the load fits
                over = await self._unaccounted()
                free = room - self._reserved_by_others(name) - over + self._leaving()
                residents = self.residents(exclude=name)
                choice, reserve = self._choose(residents, need, free), need
                wait = False
                if not choice.fits and size < need:
                    choice, reserve = self._choose(residents, size, free), size
                    # its peak may fit once busy models are idle: wait a little for that,
                    # unless it could not fit even with every model but the pinned ones gone
                    pinned = sum(r.size_bytes for r in residents if r.name in self.settings.pins)
                    ever = need + pinned <= room - over
                    wait = choice.fits and ever and loop.time() < defer_until
                if choice.fits and not wait and loop.time() < defer_until:
                    busy = cheaper_when_idle(
                        residents, reserve, free, self._now(), self._cfg, choice
                    )
                    if busy and not deferred:
                        deferred = True
                        self._counters.deferrals += 1
                        _log.info(
                            "model '%s' waits up to %.2f s for %s to finish serving: unloading "
                            "it then costs fewer reloads than the %d idle models leaving now",
                            name,
                            defer_until - loop.time(),
                            ", ".join(repr(n) for n in busy),
                            len(choice.victims),
                        )
                    wait = bool(busy)
                if wait:
                    self._reserved.pop(name, None)
                    await asyncio.sleep(_ROOM_RETRY_S)
                    continue
                if choice.fits:
                    # reserved before any await: no other load can count on these bytes
                    self._reserved[name] = reserve
                    if not choice.victims:
                        return
                    await self.evict_all(choice.victims, name)
                    continue
                self._reserved.pop(name, None)  # waits without holding bytes others could use
                self._no_room[name] = no_room_refusal(
                    name, over, self.baseline_bytes, self.settings
                )
                if choice.held_by_residency and not counted:
                    counted = True  # once per load, however long it waits
                    self._counters.thrash_refusals += 1
                    _log.warning(
                        "model '%s' waits for room: %s loaded less than %g s ago (raise the "
                        "budget, or lower --model-min-residency-secs)",
                        name,
                        ", ".join(repr(n) for n in choice.held_by_residency),
                        self.settings.min_residency_s,
                    )
                if loop.time() >= self._room_until.get(name, fallback):
                    raise UnavailableError(self._no_room[name])
                await asyncio.sleep(_ROOM_RETRY_S)
        finally:
            self._no_room.pop(name, None)

    def _demand(self, name: str) -> float:
        """The model's recent requests (as the cost order counts them) and those waiting."""
        m, now = self._models.get(name), self._now()
        heat = decayed_heat(m.heat, now - m.last_used_s, self._cfg.heat_half_life_s) if m else 0
        return heat + self._waiting.get(name, 0)

    def _transient(self, model: ModelRecord, size: int) -> int:
        return self._peaks.estimate(model, size, self._models.values())

    def _leaving(self) -> int:
        """The models being unloaded: still resident, their room promised to whoever chose
        them (else counted twice: another load unloads more for the same room)."""
        return sum(self._models[n].size_bytes for n in self._evicting & self._loaded().keys())

    def _reserved_by_others(self, name: str) -> int:
        """What the other loads under way hold or will: each its reservation, or what it has
        grown so far where that is more."""
        grown = self._shares.shares
        return sum(
            max(size, round(grown.get(other, 0.0)))
            for other, size in self._reserved.items()
            if other != name
        )

    async def _unaccounted(self) -> int:
        """Bytes the server's processes hold, measured now, beyond its baseline, the loaded
        models' sizes and the growth of the loads under way so far (never below 0)."""
        async with self._measuring:
            rss = await asyncio.to_thread(self._measure)
            self._shares.observe(rss)
        held = sum(r.size_bytes for r in self.residents()) + self._grown()
        return max(0, rss - self.baseline_bytes - held)

    def residents(self, exclude: str = "") -> list[Resident]:
        """The loaded models the policy may weigh; a model being loaded is left out (its
        reservation counts for it), one being unloaded counts as pinned until it is gone."""
        out = []
        for other, in_flight in self._loaded().items():
            m = self._models.get(other)
            if other == exclude or m is None or not m.loads or other in self._reserved:
                continue  # an ensemble's step model leaves with its ensemble
            out.append(
                Resident(
                    other,
                    m.size_bytes,
                    m.last_used_s,
                    m.loaded_at_s,
                    in_flight + self._waiting.get(other, 0),
                    other in self.settings.pins or other in self._evicting,
                    m.heat,
                    m.reload_s,
                    m.reloaded_after_s,
                )
            )
        return out

    def _choose(self, residents: list[Resident], need: int, room: int) -> Choice:
        return choose_victims(residents, need, room, self._now(), self._cfg)

    async def _evict(self, victim: str, for_name: str) -> None:
        when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        reason = eviction_reason(when, for_name, self._cfg.policy)
        model = self._models.setdefault(victim, ModelRecord())
        self._evicting.add(victim)
        self._peaks.spoil()  # the bytes it frees would read as a load's transient peak
        try:
            # one unload at a time, and no load's trim in between: the drop is the victim's
            async with self._measuring:
                before = await asyncio.to_thread(self._measure)
                self._shares.observe(before)
                # what the allocator kept since the last trim goes back first (the drop below is
                # the victim's alone), unless nothing moved since: a trim walks every free chunk
                if abs(before - self._trimmed_rss) > TRIM_SLACK_BYTES:
                    await asyncio.to_thread(self._release)
                    before = await asyncio.to_thread(self._measure)
                    self._shares.observe(before)
                await self._unload(victim, reason)
                await asyncio.to_thread(self._release)
                after = self._trimmed_rss = await asyncio.to_thread(self._measure)
                self._shares.rebase(after)  # what the unload freed is no load's
        finally:
            self._evicting.discard(victim)
        freed = before - after
        _log.info("model '%s' %s (%d bytes freed)", victim, reason, freed)
        # its size from now on: what its unloads give back (a runtime's libraries stay loaded)
        if plausible_free(model, freed):
            model.freed = [*model.freed, max(0, freed)][-SIZE_SAMPLES:]
        model.size_bytes = model_size(model)
        model.evicted_at, model.evicted_reason = when, reason
        model.evicted_s = self._now()
        self._counters.evictions += 1

    # -- views ---------------------------------------------------------------------------------

    def details(self, name: str, loaded: bool) -> tuple[tuple[str, str], ...]:
        """Extra fields of the model's repository-index rows."""
        pinned = name in self.settings.pins
        return index_details(self._models.get(name), name in self._loading, loaded, pinned)

    def statistics(self) -> OnDemandStats:
        loaded = {n: self._models[n] for n in sorted(self._loaded()) if n in self._models}
        reserved = sum(self._reserved.values())
        budget, baseline = self.settings.budget_bytes, self.baseline_bytes
        return self._counters.snapshot(budget, baseline, loaded, reserved)

    async def close(self) -> None:
        """Cancel loads under way (the server is stopping)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
