"""The eviction policy (pure, on a simulated clock) and the on-demand loader's guarantees."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.errors import UnavailableError
from inferd.repository.eviction import (
    DEFER_RATIO,
    HOLD_MIN_REQUESTS,
    EvictionConfig,
    Resident,
    cheaper_when_idle,
    choose_victims,
    decayed_heat,
    keep_value,
    request_rate,
)
from inferd.repository.memory import GrowthShares
from inferd.repository.on_demand import OnDemandLoader, OnDemandSettings
from inferd.testing import FakeClock
from inferd.tools.scaling.model_cache import che_hit_ratio, size_aware_hit_ratio, zipf_popularity
from tests.helpers.on_demand import loader_over

MODELS = [f"m{i}" for i in range(6)]


@dataclass
class _Sim:
    """Models resident under a budget, driven by requests, completions and time."""

    sizes: dict[str, int]
    budget: int
    pins: frozenset[str]
    cfg: EvictionConfig
    reload_s: dict[str, float] = field(default_factory=dict)
    now: float = 0.0
    resident: dict[str, Resident] = field(default_factory=dict)
    loads: int = 0
    gone: dict[str, Resident] = field(default_factory=dict)  # as evicted: heat, last use
    evicted_at: dict[str, float] = field(default_factory=dict)

    def view(self, exclude: str) -> list[Resident]:
        return [r for n, r in self.resident.items() if n != exclude]

    def request(self, name: str) -> None:
        r = self.resident.get(name)
        if r is not None:
            heat = decayed_heat(r.heat, self.now - r.last_used_s, self.cfg.heat_half_life_s) + 1
            self.resident[name] = Resident(
                name,
                r.size_bytes,
                self.now,
                r.loaded_at_s,
                r.in_flight + 1,
                r.pinned,
                heat,
                r.reload_s,
                r.reloaded_after_s,
            )
            return
        size = self.sizes[name]
        others = self.view(name)
        choice = choose_victims(others, size, self.budget, self.now, self.cfg)
        by_name = {r.name: r for r in others}
        excess = sum(r.size_bytes for r in others) + size - self.budget
        idle = [r for r in others if r.in_flight == 0 and not r.pinned]
        free = sum(r.size_bytes for r in idle if self.old(r))
        # ``cost`` holds a young model only against a load that cannot fit without it
        ranked = self.cfg.policy == "cost" and free >= excess
        allowed = [r for r in idle if ranked or self.old(r)]
        if not choice.fits and size <= self.budget:
            # refused only when even every model that may leave would not make room
            assert sum(r.size_bytes for r in allowed) < excess, "refused a load that fits"
            young = sorted(r.name for r in idle if not self.old(r))
            if choice.held_by_residency:
                assert choice.held_by_residency == young
        for victim in choice.victims:
            gone = by_name[victim]
            assert gone.in_flight == 0, "evicted a model with requests in flight"
            assert not gone.pinned, "evicted a pinned model"
            assert gone in allowed, "evicted a model the residency holds"
        if not choice.fits:
            assert choice.victims == []  # nothing leaves for a load that cannot happen
            return
        kept = [r for r in others if r.name not in choice.victims]
        # in the policy's order, taken from its front: no allowed survivor ranks after the last
        # victim but before another (one ranked before the last was spared: not needed)
        allowed_kept = [r for r in kept if r in allowed]
        ranks = [self.rank(by_name[v]) for v in choice.victims]
        assert ranks == sorted(ranks)
        if choice.victims:  # the last victim: where the policy's order first frees enough
            allowed = sorted([*allowed_kept, *(by_name[v] for v in choice.victims)], key=self.rank)
            freed = 0
            for r in allowed:
                freed += r.size_bytes
                if freed >= excess:
                    assert r.name == choice.victims[-1]
                    break
        # no more victims than needed: without any one of them, the load would not fit
        for victim in choice.victims:
            short = sum(r.size_bytes for r in kept) + by_name[victim].size_bytes
            assert short + size > self.budget, f"{victim} need not have left"
        for victim in choice.victims:
            self.gone[victim] = self.resident.pop(victim)
            self.evicted_at[victim] = self.now
        last = self.evicted_at.get(name)
        heat = 1.0
        before = self.gone.get(name)
        if before is not None:  # its requests before its eviction count, decayed
            since = self.now - before.last_used_s
            heat += decayed_heat(before.heat, since, self.cfg.heat_half_life_s)
        self.resident[name] = Resident(
            name,
            size,
            self.now,
            self.now,
            1,
            name in self.pins,
            heat,
            self.reload_s[name],
            float("inf") if last is None else self.now - last,
        )
        self.loads += 1
        assert sum(r.size_bytes for r in self.resident.values()) <= self.budget

    def old(self, r: Resident) -> bool:
        """Not held by the residency: past it, or (``cost``) young but not a hot model that
        thrashes: loaded for the first time or not soon after its eviction, or asked for less
        than twice per residency at its recent rate (its requests decayed, over their mean
        life)."""
        residency = self.cfg.min_residency_s
        if self.now - r.loaded_at_s >= residency:
            return True
        if self.cfg.policy != "cost":
            return False
        heat = decayed_heat(r.heat, self.now - r.last_used_s, self.cfg.heat_half_life_s)
        per_residency = heat / (self.cfg.heat_half_life_s / math.log(2)) * residency
        return not (r.reloaded_after_s < residency and per_residency >= HOLD_MIN_REQUESTS)

    def rank(self, r: Resident) -> tuple[float, float, str]:
        """The policy's order: who leaves first (least recently used, or least worth keeping
        per byte: recent requests x reload time / size)."""
        if self.cfg.policy == "cost":
            return (keep_value(r, self.now, self.cfg), r.last_used_s, r.name)
        return (r.last_used_s, 0.0, r.name)

    def finish(self, name: str) -> None:
        r = self.resident.get(name)
        if r is not None and r.in_flight > 0:
            self.resident[name] = Resident(
                name,
                r.size_bytes,
                r.last_used_s,
                r.loaded_at_s,
                r.in_flight - 1,
                r.pinned,
                r.heat,
                r.reload_s,
                r.reloaded_after_s,
            )


ops = st.lists(
    st.one_of(
        st.tuples(st.just("request"), st.sampled_from(MODELS)),
        st.tuples(st.just("finish"), st.sampled_from(MODELS)),
        st.tuples(st.just("advance"), st.floats(0.0, 30.0)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 100), min_size=len(MODELS), max_size=len(MODELS)),
    budget=st.integers(100, 400),
    pins=st.sets(st.sampled_from(MODELS), max_size=2),
    residency=st.sampled_from([0.0, 10.0, 60.0]),
    policy=st.sampled_from(["lru", "cost"]),
    reload_s=st.lists(st.floats(0.0, 5.0), min_size=len(MODELS), max_size=len(MODELS)),
    steps=ops,
)
def test_simulated_policy_never_evicts_busy_pinned_or_young_and_holds_the_budget(
    sizes: list[int],
    budget: int,
    pins: set[str],
    residency: float,
    policy: str,
    reload_s: list[float],
    steps: list[tuple[str, object]],
) -> None:
    """Both policies on a simulated clock: never a model in flight, pinned or held by the
    residency (``lru``: any young model; ``cost``: a young one that thrashes, asked for twice
    per residency, against a load that cannot fit without it), never over the budget, victims
    in the policy's order and no more than needed, and a load refused only when the models
    that may leave would not make room."""
    sim = _Sim(
        dict(zip(MODELS, sizes, strict=True)),
        budget,
        frozenset(pins),
        EvictionConfig(residency, policy),
        dict(zip(MODELS, reload_s, strict=True)),
    )
    for op, arg in steps:
        if op == "request":
            sim.request(str(arg))
        elif op == "finish":
            sim.finish(str(arg))
        else:
            assert isinstance(arg, float)
            sim.now += arg


def test_least_recently_used_goes_first_and_only_as_many_as_needed() -> None:
    resident = [
        Resident("a", 40, last_used_s=5, loaded_at_s=0),
        Resident("b", 40, last_used_s=1, loaded_at_s=0),
        Resident("c", 40, last_used_s=3, loaded_at_s=0),
    ]
    choice = choose_victims(resident, 50, 120, 100, EvictionConfig(10))
    assert choice.fits
    assert choice.victims == ["b", "c"]
    assert choose_victims(resident, 10, 130, 100, EvictionConfig(10)).victims == []
    assert choose_victims(resident, 50, 130, 100, EvictionConfig(10)).victims == ["b"]


def test_cost_keeps_small_busy_models_and_slow_loads_over_a_large_idle_one() -> None:
    cfg = EvictionConfig(0, "cost", heat_half_life_s=30)
    resident = [
        # used most recently, but once, and large: least worth keeping per byte
        Resident("large", 100, last_used_s=99, loaded_at_s=0, heat=1, reload_s=1.0),
        Resident("busy", 10, last_used_s=90, loaded_at_s=0, heat=50, reload_s=0.02),
        Resident("slow", 10, last_used_s=80, loaded_at_s=0, heat=1, reload_s=2.0),
    ]
    assert choose_victims(resident, 20, 120, 100, cfg).victims == ["large"]
    # LRU would have taken the two older ones
    assert choose_victims(resident, 20, 120, 100, EvictionConfig(0)).victims == ["slow", "busy"]


def test_heat_fades_with_its_half_life_so_a_former_favourite_leaves() -> None:
    cfg = EvictionConfig(0, "cost", heat_half_life_s=10)
    old = Resident("old", 10, last_used_s=0, loaded_at_s=0, heat=64, reload_s=0.1)
    new = Resident("new", 10, last_used_s=100, loaded_at_s=90, heat=2, reload_s=0.1)
    assert decayed_heat(64, 20, 10) == pytest.approx(16)
    assert keep_value(old, 10, cfg) > keep_value(new, 10, cfg)
    # 100 s later (ten half-lives) the old favourite's 64 requests weigh less than 2 new ones
    assert choose_victims([old, new], 10, 20, 100, cfg).victims == ["old"]


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown eviction policy 'mru'"):
        EvictionConfig(0, "mru")


def test_a_model_too_big_for_the_budget_evicts_nothing() -> None:
    resident = [Resident("a", 40, 0, 0)]
    choice = choose_victims(resident, 200, 100, 100, EvictionConfig(0))
    assert not choice.fits
    assert choice.victims == []


def test_residency_holds_a_young_model_and_says_so() -> None:
    resident = [Resident("hot", 80, last_used_s=99, loaded_at_s=95)]
    choice = choose_victims(resident, 50, 100, 100, EvictionConfig(10))
    assert not choice.fits
    assert choice.victims == []
    assert choice.held_by_residency == ["hot"]
    # once its residency ran out it may leave
    assert choose_victims(resident, 50, 100, 106, EvictionConfig(10)).victims == ["hot"]


def test_cost_holds_a_thrashing_model_only_if_asked_for_twice_per_residency() -> None:
    """``cost``: a model evicted and loaded again at once is held for the residency only if it
    is asked for, at its recent rate, at least twice per residency: a hold saves reloads only
    for the requests that come during it. A large model asked for every 13 s and back 8 s after
    its eviction may leave again (held, it would take the small busy models' room and still be
    out before its next request); one asked for every 2 s is held; ``lru`` holds both."""
    cfg = EvictionConfig(10.0, "cost")
    mean_life = cfg.heat_half_life_s / math.log(2)  # a steady rate x: a heat of x * mean_life
    rare = Resident(
        "rare",
        80,
        last_used_s=100,
        loaded_at_s=100,
        heat=mean_life / 13,
        reload_s=1.5,
        reloaded_after_s=8.0,
    )
    hot = replace(rare, name="hot", heat=mean_life / 2)
    assert request_rate(rare, 100, cfg) == pytest.approx(1 / 13)
    assert choose_victims([rare], 50, 100, 101, cfg).victims == ["rare"]
    held = choose_victims([hot], 50, 100, 101, cfg)
    assert not held.fits
    assert held.held_by_residency == ["hot"]
    # not a thrash: loaded again long after its eviction, or for the first time
    for back in (10.0, math.inf):
        late = Resident("hot", 80, 100, 100, heat=mean_life / 2, reloaded_after_s=back)
        assert choose_victims([late], 50, 100, 101, cfg).victims == ["hot"]
    assert choose_victims([hot], 50, 100, 110, cfg).victims == ["hot"]  # residency over
    lru = EvictionConfig(10.0, "lru")
    assert choose_victims([rare, hot], 50, 180, 101, lru).held_by_residency == ["hot", "rare"]


def test_cost_holds_a_hot_thrashing_model_only_against_a_load_that_needs_it() -> None:
    """A load that the other idle models can make room for ranks the held model with them (the
    cost order may take it: here it is the least worth keeping per byte); a load that cannot
    fit without it waits, and the refusal names it."""
    cfg = EvictionConfig(10.0, "cost")
    mean_life = cfg.heat_half_life_s / math.log(2)
    hot = Resident(
        "hot", 60, 100, 100, heat=mean_life / 2, reload_s=0.1, reloaded_after_s=1.0
    )  # asked for every 2 s, back 1 s after its eviction: held
    busy = Resident("busy", 40, 100, 0, heat=5 * mean_life, reload_s=0.1)  # 5 a second
    assert keep_value(hot, 101, cfg) < keep_value(busy, 101, cfg)
    assert choose_victims([hot, busy], 30, 100, 101, cfg).victims == ["hot"]
    refused = choose_victims([hot, busy], 70, 100, 101, cfg)
    assert not refused.fits
    assert refused.victims == []
    assert refused.held_by_residency == ["hot"]
    assert choose_victims([hot, busy], 70, 100, 111, cfg).victims == ["hot", "busy"]


def _alternate(
    cfg: EvictionConfig, reload_s: dict[str, float], gap_s: float, seconds: float
) -> tuple[list[float], int]:
    """Two models of 60 with room for 100, asked for in turn every ``gap_s`` for ``seconds``,
    driven as the loader drives the policy (a request is served at once, or, refused, counted
    as a thrash and not served); the times of the loads and the refusals."""
    resident: dict[str, Resident] = {}
    gone: dict[str, tuple[float, float]] = {}  # name -> when evicted, its heat then
    loads: list[float] = []
    refusals = 0
    for k in range(int(seconds / gap_s)):
        now, name = k * gap_s, "ab"[k % 2]
        r = resident.get(name)
        if r is None:
            choice = choose_victims(list(resident.values()), 60, 100, now, cfg)
            if not choice.fits:
                refusals += bool(choice.held_by_residency)
                continue
            for victim in choice.victims:
                out = resident.pop(victim)
                gone[victim] = (now, decayed_heat(out.heat, now - out.last_used_s, 30.0))
            evicted, heat = gone.get(name, (-math.inf, 0.0))
            r = Resident(name, 60, now, now, heat=decayed_heat(heat, now - evicted, 30.0))
            r = replace(r, reload_s=reload_s[name], reloaded_after_s=now - evicted)
            loads.append(now)
        heat = decayed_heat(r.heat, now - r.last_used_s, cfg.heat_half_life_s) + 1
        resident[name] = replace(r, last_used_s=now, heat=heat)
    return loads, refusals


@settings(max_examples=40, deadline=None)
@given(
    residency=st.sampled_from([1.0, 10.0, 60.0]),
    per_residency=st.floats(10.0, 50.0),
    reload_a=st.floats(0.0, 5.0),
    reload_b=st.floats(0.0, 5.0),
    policy=st.sampled_from(["cost", "lru"]),
)
def test_two_hot_models_that_do_not_fit_together_cannot_swap_on_every_request(
    residency: float, per_residency: float, reload_a: float, reload_b: float, policy: str
) -> None:
    """Each asked for at least 5 times per residency, whatever their load times: once their
    request rates show (the heat of a steady rate crosses twice per residency within half its
    mean life, 22 s), the one back first stays for the residency and the other's requests are
    refused (the thrash metric), so they swap at most twice per residency. Without the
    residency they swap on every request."""
    cfg = EvictionConfig(residency, policy)
    gap = residency / per_residency
    warm, measured = 30.0, max(5 * residency, 30.0)
    times = {"a": reload_a, "b": reload_b}
    loads, refusals = _alternate(cfg, times, gap, warm + measured)
    assert len([t for t in loads if t >= warm]) <= 2 * (measured / residency + 1)
    assert refusals >= measured / residency
    free, none = _alternate(EvictionConfig(0.0, policy), times, gap, warm + measured)
    assert len(free) == int((warm + measured) / gap)
    assert none == 0


def test_in_flight_and_pinned_models_stay_even_when_nothing_else_fits() -> None:
    resident = [Resident("busy", 60, 0, 0, in_flight=1), Resident("pin", 30, 0, 0, pinned=True)]
    choice = choose_victims(resident, 50, 100, 100, EvictionConfig(0))
    assert not choice.fits
    assert choice.victims == []
    assert choice.held_by_residency == []


# -- the on-demand loader ---------------------------------------------------------------------


class _Host:
    """The repository manager's side of the loader: loads gated by an event, sizes by name."""

    def __init__(
        self, sizes: dict[str, int], fail: set[str] | None = None, on_disk: bool = True
    ) -> None:
        self.sizes = sizes
        self.on_disk = on_disk
        self.fail = fail or set()
        self.loaded: dict[str, int] = {}  # name -> in flight
        self.load_calls: dict[str, int] = {}
        self.unloaded: list[tuple[str, str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.unload_gate = asyncio.Event()  # unloads wait for it
        self.unload_gate.set()
        self.holds: dict[str, asyncio.Event] = {}  # a model's load waits for its own too
        self.rss = 1000
        self.residue = 0  # bytes an unload leaves in the resident set
        self.clock = FakeClock()

    async def load(self, name: str) -> str:
        self.load_calls[name] = self.load_calls.get(name, 0) + 1
        await self.gate.wait()
        if name in self.holds:
            await self.holds[name].wait()
        if name in self.fail:
            raise UnavailableError(f"failed to load '{name}': broken")
        self.loaded[name] = 0
        self.rss += self.sizes[name]
        return "onnxruntime"

    async def unload(self, name: str, reason: str) -> None:
        await self.unload_gate.wait()
        del self.loaded[name]
        self.rss -= self.sizes[name] - self.residue  # what stays is counted by the loader
        self.unloaded.append((name, reason))

    async def estimate(self, name: str) -> int:
        return self.sizes[name] if self.on_disk else 0

    def loader(self, budget: int | None, **kw: object) -> OnDemandLoader:
        return loader_over(self, OnDemandSettings(budget_bytes=budget, **kw))  # type: ignore[arg-type]


async def test_one_load_per_model_however_many_waiters() -> None:
    host = _Host({"a": 100})
    loader = host.loader(None)
    await loader.start()
    host.gate.clear()
    waiters = [asyncio.create_task(loader.ensure("a")) for _ in range(50)]
    await asyncio.sleep(0.01)
    assert loader.loading() == ["a"]
    host.gate.set()
    await asyncio.gather(*waiters)
    assert host.load_calls == {"a": 1}
    assert loader.statistics().loads == {"first_request": 1}
    assert loader.statistics().resident_bytes == {"a": 100}  # the measured growth


async def test_waiters_are_bounded_and_the_load_goes_on() -> None:
    host = _Host({"a": 100})
    loader = host.loader(None, wait_s=0.05)
    await loader.start()
    host.gate.clear()
    with pytest.raises(UnavailableError, match="'a' is loading on demand"):
        await loader.ensure("a")
    host.gate.set()
    await loader.ensure("a")  # joins the same load
    assert host.load_calls == {"a": 1}


async def test_a_failed_load_fails_only_its_waiters() -> None:
    host = _Host({"a": 100, "bad": 100}, fail={"bad"})
    loader = host.loader(None)
    await loader.start()
    results = await asyncio.gather(
        loader.ensure("bad"), loader.ensure("bad"), loader.ensure("a"), return_exceptions=True
    )
    assert [type(r) for r in results] == [UnavailableError, UnavailableError, type(None)]
    assert host.loaded == {"a": 0}
    assert host.load_calls == {"bad": 1, "a": 1}


async def test_a_failed_load_is_not_tried_again_until_its_back_off_ends() -> None:
    host = _Host({"bad": 100}, fail={"bad"})
    loader = host.loader(None, load_retry_s=10.0)
    await loader.start()
    with pytest.raises(UnavailableError, match=r"failed to load 'bad': broken$"):
        await loader.ensure("bad")
    host.clock.advance(9 * 10**9)
    for _ in range(5):  # refused with the remembered error, no load
        with pytest.raises(UnavailableError, match=r"broken \(model 'bad' failed to load 9"):
            await loader.ensure("bad")
    assert host.load_calls == {"bad": 1}
    host.clock.advance(10**9)
    host.fail.clear()  # the operator fixed it: the first request after the back-off loads it
    await loader.ensure("bad")
    assert host.load_calls == {"bad": 2}
    assert host.loaded == {"bad": 0}


async def test_a_zero_back_off_tries_the_load_on_every_request() -> None:
    host = _Host({"bad": 100}, fail={"bad"})
    loader = host.loader(None, load_retry_s=0.0)
    await loader.start()
    for _ in range(3):
        with pytest.raises(UnavailableError, match=r"failed to load 'bad': broken$"):
            await loader.ensure("bad")
    assert host.load_calls == {"bad": 3}


async def test_eviction_makes_room_lru_first_and_the_index_says_why() -> None:
    host = _Host({"a": 100, "b": 100, "c": 100})
    loader = host.loader(1000 + 250, min_residency_s=0.0, eviction="lru")
    await loader.start()  # baseline: 1000
    await loader.ensure("a")
    await loader.ensure("b")
    host.clock.advance(10**9)
    loader.touch("a")  # b is now the least recently used
    await loader.ensure("c")
    assert [name for name, _ in host.unloaded] == ["b"]
    assert "to make room for 'c'" in host.unloaded[0][1]
    assert dict(loader.details("b", loaded=False))["on_demand"] == "available"
    assert "evicted_at" in dict(loader.details("b", loaded=False))
    await loader.ensure("b")  # a reload
    assert loader.statistics().loads == {"first_request": 3, "after_eviction": 1}
    assert loader.statistics().evictions == 2


async def test_the_cost_policy_ranks_by_requests_load_time_and_size() -> None:
    """The loader feeds the policy each model's requests (touch) and its measured load time:
    under ``cost`` the model asked for often stays although it was used least recently."""
    host = _Host({"a": 100, "b": 100, "c": 100})
    loader = host.loader(1000 + 250, min_residency_s=0.0, eviction="cost")
    await loader.start()
    await loader.ensure("a")
    for _ in range(20):
        loader.touch("a")
    host.clock.advance(10**9)
    await loader.ensure("b")
    loader.touch("b")
    host.clock.advance(10**9)
    await loader.ensure("c")
    assert [name for name, _ in host.unloaded] == ["b"]  # LRU would have taken 'a'
    assert "(least worth keeping, idle)" in host.unloaded[0][1]
    a = {r.name: r for r in loader.residents()}["a"]
    assert a.heat == 20  # as of its last request; the policy decays it to the time it decides
    assert a.reload_s == 0  # its load took no time on the fake clock


@pytest.mark.parametrize("on_disk", [True, False], ids=["known-on-disk", "measured"])
async def test_a_model_larger_than_the_budget_is_refused_and_unloaded(on_disk: bool) -> None:
    host = _Host({"small": 10, "huge": 500}, on_disk=on_disk)
    loader = host.loader(1000 + 100)
    await loader.start()
    with pytest.raises(UnavailableError, match=r"'huge' needs 500 bytes .*budget of 1100"):
        await loader.ensure("huge")
    assert "huge" not in host.loaded
    # loaded only when its files did not tell: measured, then unloaded
    assert host.load_calls.get("huge", 0) == (0 if on_disk else 1)
    with pytest.raises(UnavailableError, match="raise --model-memory-budget"):
        await loader.ensure("huge")  # known now: refused at once, without loading again
    assert host.load_calls.get("huge", 0) == (0 if on_disk else 1)
    assert dict(loader.details("huge", loaded=False))["on_demand"] == "too_big"
    await loader.ensure("small")


async def test_busy_models_make_a_load_wait_then_fail_with_a_clear_503() -> None:
    host = _Host({"a": 100, "b": 100})
    loader = host.loader(1000 + 150, min_residency_s=0.0, wait_s=0.1)
    await loader.start()
    await loader.ensure("a")
    host.loaded["a"] = 1  # a request in flight
    with pytest.raises(UnavailableError, match="'b' cannot load now"):
        await loader.ensure("b")
    assert host.unloaded == []
    host.loaded["a"] = 0
    await loader.ensure("b")  # once idle, it leaves
    assert [name for name, _ in host.unloaded] == ["a"]


async def test_residency_refusals_are_counted_as_thrash() -> None:
    host = _Host({"a": 100, "b": 100})
    loader = host.loader(1000 + 150, min_residency_s=60.0, wait_s=0.05, eviction="lru")
    await loader.start()
    await loader.ensure("a")  # ``lru``: the residency holds every young model
    with pytest.raises(UnavailableError):
        await loader.ensure("b")
    assert loader.statistics().thrash_refusals == 1
    host.clock.advance(61 * 10**9)
    for _ in range(200):  # its 0.05 s wait may run out on a busy machine: the load goes on
        try:
            await loader.ensure("b")
            break
        except UnavailableError:
            await asyncio.sleep(0.05)
    assert [name for name, _ in host.unloaded] == ["a"]


async def test_the_loader_lets_a_rarely_used_model_that_thrashes_leave() -> None:
    """The loader gives the policy each model's requests: 'a', evicted and loaded again at once
    but asked for only by the requests that loaded it, is not held (a hold would save no
    reload); 'b' loads at once instead of waiting, and no thrash is counted."""
    host = _Host({"a": 100, "b": 100})
    loader = host.loader(1000 + 150, min_residency_s=10.0, eviction="cost", wait_s=5.0)
    await loader.start()
    for name in ("a", "b", "a"):
        await loader.ensure(name)
        loader.touch(name)
        host.clock.advance(10**8)
    await loader.ensure("b")  # 'a' came back 0.1 s after its eviction
    assert [name for name, _ in host.unloaded] == ["a", "b", "a"]
    assert loader.statistics().thrash_refusals == 0
    await loader.close()


async def test_a_request_that_joins_a_load_waiting_for_room_waits_its_own_time() -> None:
    """The load waits for room as long as its latest request may: a request that joins late is
    answered once room frees, even after the first request's wait ran out."""
    host = _Host({"a": 100, "b": 100})
    loader = host.loader(1000 + 150, min_residency_s=60.0, wait_s=0.2, eviction="lru")
    await loader.start()
    await loader.ensure("a")  # ``lru``: the residency holds every young model
    first = asyncio.create_task(loader.ensure("b"))
    await asyncio.sleep(0.15)
    second = asyncio.create_task(loader.ensure("b"))  # joins the same load
    await asyncio.sleep(0.1)  # past the first request's 0.2 s, within the second's
    host.clock.advance(61 * 10**9)  # 'a' may leave now
    await second
    with pytest.raises(UnavailableError):
        await first
    assert [name for name, _ in host.unloaded] == ["a"]


async def test_a_load_larger_than_its_estimate_unloads_idle_models_after_it() -> None:
    host = _Host({"a": 100, "b": 100, "c": 100}, on_disk=False)  # nothing known before loads
    loader = host.loader(1000 + 250, min_residency_s=0.0, eviction="lru")
    await loader.start()
    for name in ("a", "b", "c"):
        await loader.ensure(name)
    assert [name for name, _ in host.unloaded] == ["a"]
    assert sorted(host.loaded) == ["b", "c"]
    await loader.ensure("a")  # its size is known now: room is made before it loads
    assert [name for name, _ in host.unloaded] == ["a", "b"]


async def test_closing_fails_the_waiters_of_a_load_under_way() -> None:
    host = _Host({"a": 100})
    loader = host.loader(None)
    await loader.start()
    host.gate.clear()
    waiter = asyncio.create_task(loader.ensure("a"))
    await asyncio.sleep(0.01)
    await loader.close()
    with pytest.raises(UnavailableError, match="'a' was loading when the server stopped"):
        await waiter


@settings(max_examples=50, deadline=None)
@given(
    bursts=st.lists(
        st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=20), max_size=5
    ),
    budget=st.sampled_from([None, 1000 + 250]),
)
def test_one_load_per_model_per_absence_however_requests_interleave(
    bursts: list[list[str]], budget: int | None
) -> None:
    """Each burst's requests arrive together while loads are held: a model absent at the
    burst's start loads exactly once however many of its requests wait, one present is
    answered without a load, and the budget holds after every burst."""

    async def run() -> None:
        host = _Host({"a": 100, "b": 100, "c": 100})
        loader = host.loader(budget, min_residency_s=0.0)
        await loader.start()
        for burst in bursts:
            before = dict(host.load_calls)
            absent = {n for n in burst if n not in host.loaded}
            host.gate.clear()
            waiters = []
            for name in burst:  # as the manager does: a loaded model is answered at once
                if name in host.loaded:
                    loader.touch(name)
                else:
                    waiters.append(asyncio.create_task(loader.ensure(name)))
            await asyncio.sleep(0)
            host.gate.set()
            await asyncio.gather(*waiters)
            for name in set(burst):
                loads = host.load_calls.get(name, 0) - before.get(name, 0)
                assert loads == (1 if name in absent else 0)
            used = sum(host.sizes[n] for n in host.loaded)
            assert budget is None or used <= budget - 1000

    asyncio.run(run())


# -- the policies on a catalogue of mixed sizes ------------------------------------------------


def _simulate(
    policy: str,
    p: np.ndarray,
    sizes: list[int],
    reload_s: list[float],
    capacity: int,
    *,
    residency: float = 0.0,
    rate: float = 500.0,
) -> float:
    """The hit ratio of :func:`choose_victims` as the loader drives it, requests drawn
    independently from ``p`` at ``rate`` a second (nothing in flight; a load the residency
    refuses is a miss that loads nothing); the first quarter warms the cache up."""
    cfg = EvictionConfig(residency, policy)
    requests = 16_000
    draws = np.random.default_rng(3).choice(len(p), size=requests, p=p).tolist()
    heat: dict[int, float] = {}
    last: dict[int, float] = {}
    loaded_at: dict[int, float] = {}
    evicted_at: dict[int, float] = {}
    resident: set[int] = set()
    hits = 0
    for n, m in enumerate(draws):
        now = n / rate
        hit = m in resident
        if not hit:
            view = [
                Resident(
                    str(k),
                    sizes[k],
                    last[k],
                    loaded_at[k],
                    heat=heat[k],
                    reload_s=reload_s[k],
                    reloaded_after_s=loaded_at[k] - evicted_at.get(k, -math.inf),
                )
                for k in resident
            ]
            choice = choose_victims(view, sizes[m], capacity, now, cfg)
            assert choice.fits or residency > 0
            if not choice.fits:
                continue  # a miss; its request is not served (nor counted as a use)
            for v in choice.victims:
                resident.discard(int(v))
                evicted_at[int(v)] = now
            resident.add(m)
            loaded_at[m] = now
        heat[m] = decayed_heat(heat.get(m, 0.0), now - last.get(m, now), cfg.heat_half_life_s) + 1
        last[m] = now
        hits += hit and n >= requests // 4
    return hits / (requests - requests // 4)


def _mixed_catalogue() -> tuple[Any, list[int], list[float], int]:
    """150 small models and 5 a hundred times larger, popularity ranks shuffled, Zipf(1.1), a
    budget of a fifth of their bytes: popularity, sizes, load times and the budget."""
    rng = np.random.default_rng(5)
    mib = 1 << 20
    sizes = [int(x) for x in rng.integers(1 * mib, 4 * mib, 150)] + [300 * mib] * 5
    reload_s = [0.05] * 150 + [2.0] * 5
    p = zipf_popularity(len(sizes), 1.1)[np.argsort(rng.permutation(len(sizes)))]
    return p, sizes, reload_s, sum(sizes) // 5


def test_cost_holds_more_of_the_traffic_than_lru_when_sizes_differ() -> None:
    """150 small models and 5 a hundred times larger, popularity ranks shuffled, Zipf(1.1), a
    budget of a fifth of their bytes: LRU lands on Che's approximation, ``cost`` well above it
    and within the size-aware ceiling (``inferd plan --models --eviction``)."""
    p, sizes, reload_s, capacity = _mixed_catalogue()
    che = che_hit_ratio(p, np.array(sizes, float), capacity).hit_ratio
    ceiling = size_aware_hit_ratio(p, np.array(sizes, float), capacity).hit_ratio
    lru = _simulate("lru", p, sizes, reload_s, capacity)
    cost = _simulate("cost", p, sizes, reload_s, capacity)
    assert lru == pytest.approx(che, abs=0.03)
    assert cost > lru + 0.1
    assert cost <= ceiling + 0.01


def test_the_cost_residency_costs_little_hit_ratio_on_a_mixed_catalogue() -> None:
    """The catalogue above at 25 requests a second, a 10 s residency: a large model that
    ``cost`` evicts (it ranks lowest per byte) and that is asked for again within 10 s is held
    only if it is asked for twice per residency, and only against a load that cannot fit
    without it. Holding every one that came back against every load (the rule before) kept
    300 MiB of a 374 MiB budget from the small models: 0.675 against 0.791 with no residency;
    with the first condition alone 0.779 (one asked for every 4.6 s was still held); now
    0.791."""
    p, sizes, reload_s, capacity = _mixed_catalogue()
    free = _simulate("cost", p, sizes, reload_s, capacity, rate=25.0)
    held = _simulate("cost", p, sizes, reload_s, capacity, residency=10.0, rate=25.0)
    assert held >= free - 0.005


# -- parallel loads ----------------------------------------------------------------------------


async def test_loads_of_different_models_run_in_parallel_up_to_the_load_threads() -> None:
    host = _Host({"a": 100, "b": 100, "c": 100})
    loader = host.loader(None, load_threads=2)
    await loader.start()
    host.gate.clear()
    waiters = [asyncio.create_task(loader.ensure(n)) for n in ("a", "b", "c")]
    for _ in range(50):
        await asyncio.sleep(0.005)
    assert sorted(host.load_calls) == ["a", "b"]  # two at once, the third waits for a slot
    host.gate.set()
    await asyncio.gather(*waiters)
    assert host.load_calls == {"a": 1, "b": 1, "c": 1}
    assert loader.statistics().peak_parallel_loads == 2
    # growth measured while loads overlapped is shared, not counted twice
    assert sum(loader.statistics().resident_bytes.values()) == 300


async def test_concurrent_loads_reserve_their_sizes_before_they_start() -> None:
    """Room for two of three (``x`` and ``y`` serve requests and hold the rest): the third
    load waits until one of the first two is loaded and may leave; a model being loaded is
    never chosen to make room."""
    host = _Host({"x": 60, "y": 60, "a": 60, "b": 60, "c": 60})
    loader = host.loader(1000 + 250, min_residency_s=0.0, eviction="lru", load_threads=3)
    await loader.start()
    for name in ("x", "y"):
        await loader.ensure(name)
        host.loaded[name] = 1  # a request in flight, to the end
    host.gate.clear()
    waiters = [asyncio.create_task(loader.ensure(n)) for n in ("a", "b", "c")]
    for _ in range(50):
        await asyncio.sleep(0.005)
    assert sorted(host.load_calls) == ["a", "b", "x", "y"]
    assert loader.statistics().loading_bytes == 120  # a, b 60 each; c reserved nothing yet
    assert host.unloaded == []
    host.gate.set()
    await asyncio.gather(*waiters)
    assert len(host.unloaded) == 1
    assert host.unloaded[0][0] in ("a", "b")
    assert sum(host.sizes[n] for n in host.loaded) <= 250


async def test_large_loads_take_turns_without_holding_a_load_thread() -> None:
    """``big1`` and ``big2`` are each over a quarter of the room: the second waits for the
    first to end, and a small model asked for meanwhile loads at once (the waiting large load
    holds no load thread). Once ``big1`` is loaded and idle, ``big2`` takes its place, and the
    small models stay; loaded together, both would have needed the small ones' room."""
    host = _Host({"big1": 400, "big2": 400, "s1": 50, "s2": 50, "s3": 50})
    loader = host.loader(1000 + 700, min_residency_s=0.0, eviction="cost", load_threads=2)
    await loader.start()
    for name in ("s1", "s2"):
        await loader.ensure(name)
    host.gate.clear()
    first = asyncio.create_task(loader.ensure("big1"))
    second = asyncio.create_task(loader.ensure("big2"))
    for _ in range(20):
        await asyncio.sleep(0.005)
    assert "big2" not in host.load_calls  # its turn has not come
    small = asyncio.create_task(loader.ensure("s3"))
    for _ in range(400):  # its load starts within a few loop turns (up to 2 s on a busy machine)
        if "s3" in host.load_calls:
            break
        await asyncio.sleep(0.005)
    assert "s3" in host.load_calls  # the second load thread was free for it
    assert "big2" not in host.load_calls
    host.gate.set()
    await asyncio.gather(first, second, small)
    assert [name for name, _ in host.unloaded] == ["big1"]
    assert sorted(host.loaded) == ["big2", "s1", "s2", "s3"]


async def test_models_being_unloaded_for_a_load_are_not_counted_again_by_another() -> None:
    """``big`` (150) reserves its room and unloads ``s1`` and ``s2`` to make it; while those
    unloads run, ``x`` (50) asks for room. Once they are gone, ``s3``, ``s4``, ``big`` and
    ``x`` fit the 400 bytes: ``x`` unloads nothing (counting the leaving models as still
    resident besides ``big``'s reservation, it unloaded ``s3`` and ``s4`` too)."""
    sizes = {"s1": 100, "s2": 100, "s3": 100, "s4": 100, "big": 150, "x": 50}
    host = _Host(sizes)
    loader = host.loader(1000 + 400, min_residency_s=0.0, eviction="lru", load_threads=2)
    await loader.start()
    for name in ("s1", "s2", "s3", "s4"):
        await loader.ensure(name)
        host.clock.advance(10**9)
    host.unload_gate.clear()
    host.holds["big"] = asyncio.Event()  # big grows once x is loaded: x's growth is its own
    big = asyncio.create_task(loader.ensure("big"))
    for _ in range(20):
        await asyncio.sleep(0.005)
    small = asyncio.create_task(loader.ensure("x"))
    for _ in range(20):
        await asyncio.sleep(0.005)
    host.unload_gate.set()
    await small
    host.holds["big"].set()
    await big
    assert sorted(name for name, _ in host.unloaded) == ["s1", "s2"]
    assert sorted(host.loaded) == ["big", "s3", "s4", "x"]


def test_growth_shares_sum_to_the_growth_and_a_lone_load_gets_all_of_it() -> None:
    shares = GrowthShares()
    shares.begin("a", 100, 1000)
    assert shares.end("a", 1070) == 70  # alone: exactly its growth
    shares.begin("a", 100, 1070)
    shares.begin("b", 300, 1170)  # a grew 100 alone
    got_a = shares.end("a", 1570)  # 400 more while both ran: split 1:3
    got_b = shares.end("b", 1670)
    assert (got_a, got_b) == (200, 400)
    shares.begin("c", 10, 1670)
    shares.rebase(1500)  # an unload freed 170: nobody's load
    assert shares.end("c", 1520) == 20


@dataclass
class _ParallelHost:
    """Loads held until the test finishes them, one by one, in any order."""

    sizes: dict[str, int]
    room: int
    loaded: dict[str, int] = field(default_factory=dict)
    pending: dict[str, asyncio.Event] = field(default_factory=dict)
    rss: int = 1000
    peak: int = 0
    clock: FakeClock = field(default_factory=FakeClock)

    async def load(self, name: str) -> str:
        assert name not in self.pending, "two loads of one model"
        assert name not in self.loaded
        self.pending[name] = asyncio.Event()
        self.peak = max(self.peak, len(self.pending))
        await self.pending[name].wait()
        del self.pending[name]
        self.loaded[name] = 0
        self.rss += self.sizes[name]
        return "onnxruntime"

    async def unload(self, name: str, reason: str) -> None:
        assert name not in self.pending, "unloaded a model being loaded"
        del self.loaded[name]
        self.rss -= self.sizes[name]

    async def estimate(self, name: str) -> int:
        return self.sizes[name]

    def committed(self) -> int:
        """Loaded models and the loads under way: what the budget must hold."""
        return sum(self.sizes[n] for n in [*self.loaded, *self.pending])


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(10, 100), min_size=5, max_size=5),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("request"), st.integers(0, 4)),
            st.tuples(st.just("finish"), st.integers(0, 4)),
            st.tuples(st.just("tick"), st.just(0)),
        ),
        max_size=30,
    ),
    threads=st.integers(1, 4),
)
def test_concurrent_loads_never_overcommit_the_budget(
    sizes: list[int], ops: list[tuple[str, int]], threads: int
) -> None:
    """Requests, load completions in any order and time passing (a simulated clock): loaded
    models plus loads under way never exceed the budget, no model loads twice at once, none
    being loaded is unloaded, and no more than ``load_threads`` loads run at once."""
    names = [f"m{i}" for i in range(5)]
    host = _ParallelHost(dict(zip(names, sizes, strict=True)), room=250)

    async def settle() -> None:
        seen = None
        while True:
            await asyncio.sleep(0.001)
            now = (sorted(host.pending), sorted(host.loaded), host.rss)
            if now == seen:
                return
            seen = now

    async def run() -> None:
        settings = OnDemandSettings(
            budget_bytes=1000 + host.room, min_residency_s=1.0, wait_s=60.0, load_threads=threads
        )
        loader = loader_over(host, settings)
        await loader.start()
        waiters = []
        for op, k in ops:
            if op == "request":
                waiters.append(asyncio.create_task(loader.ensure(names[k])))
            elif op == "finish" and host.pending:
                host.pending[sorted(host.pending)[k % len(host.pending)]].set()
            elif op == "tick":
                host.clock.advance(10**9)
            await settle()
            assert host.committed() <= host.room
            assert host.peak <= threads
        host.clock.advance(10 * 10**9)
        for _ in range(500):  # every load finishes, every request is answered
            if not host.pending and all(w.done() for w in waiters):
                break
            for event in list(host.pending.values()):
                event.set()
            # time passes here too: a model loaded in this phase holds its minimum residency
            # until the clock moves, and a load waiting for room behind it must then go ahead
            host.clock.advance(10**9)
            await settle()
            assert host.committed() <= host.room
        assert all(w.done() for w in waiters), (host.pending, host.loaded, loader.loading())
        await asyncio.gather(*waiters)
        await loader.close()

    asyncio.run(run())


async def test_a_model_just_loaded_is_not_evicted_before_its_waiters_reach_it() -> None:
    """Between the end of a load and the resumption of the requests that waited for it, the
    model counts as busy: another load cannot unload it from under them."""
    host = _Host({"a": 100})
    loader = host.loader(1000 + 150, min_residency_s=0.0)
    await loader.start()
    waiter = asyncio.create_task(loader.ensure("a"))
    until = asyncio.get_running_loop().time() + 10
    for _ in range(10**7):  # one step of the loop at a time: stop as the load ends
        if loader.residents() or asyncio.get_running_loop().time() > until:
            break
        await asyncio.sleep(0)
    assert not waiter.done()
    assert [r.in_flight for r in loader.residents()] == [1]  # its waiter, not yet served
    await waiter
    assert [r.in_flight for r in loader.residents()] == [0]


def _large_busy_and_small_hot(large_heat: float) -> list[Resident]:
    """A large model serving a request and ten small ones asked for often, all idle but it."""
    large = Resident("large", 300, 99, 0, in_flight=1, heat=large_heat, reload_s=1.0)
    small = [Resident(f"s{k}", 30, 99, 0, heat=20, reload_s=0.1) for k in range(10)]
    return [large, *small]


def test_cost_waits_for_a_busy_large_model_rather_than_flush_hot_small_ones() -> None:
    cfg = EvictionConfig(0, "cost")
    resident = _large_busy_and_small_hot(large_heat=1)
    now = choose_victims(resident, 300, 700, 100, cfg)
    assert now.fits
    assert len(now.victims) == 7
    assert cheaper_when_idle(resident, 300, 700, 100, cfg, now) == ["large"]
    # a hot large model is not worth the wait: its reloads would cost as much
    hot = _large_busy_and_small_hot(large_heat=20 * 7 * 0.1 / DEFER_RATIO)
    assert cheaper_when_idle(hot, 300, 700, 100, cfg, choose_victims(hot, 300, 700, 100, cfg)) == []
    # nothing to wait for: it fits, it cannot fit, no model is busy, or the policy is lru
    assert (
        cheaper_when_idle(resident, 0, 700, 100, cfg, choose_victims(resident, 0, 700, 100, cfg))
        == []
    )
    idle = [replace(r, in_flight=0) for r in resident]
    assert (
        cheaper_when_idle(idle, 300, 700, 100, cfg, choose_victims(idle, 300, 700, 100, cfg)) == []
    )
    pinned = [replace(resident[0], pinned=True), *resident[1:]]
    assert cheaper_when_idle(pinned, 300, 700, 100, cfg, now) == []
    lru = EvictionConfig(0, "lru")
    assert (
        cheaper_when_idle(
            resident, 300, 700, 100, lru, choose_victims(resident, 300, 700, 100, lru)
        )
        == []
    )


async def test_a_large_load_waits_briefly_for_a_busy_large_model_to_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sizes = {"large": 300, "large2": 300} | {f"s{k}": 30 for k in range(10)}
    host = _Host(sizes)
    loader = host.loader(1000 + 700, min_residency_s=0.0, eviction="cost")
    await loader.start()
    for name in sorted(sizes):
        if name != "large2":
            await loader.ensure(name)
    for _ in range(20):
        for k in range(10):
            loader.touch(f"s{k}")
    host.loaded["large"] = 1  # serving a request
    load = asyncio.create_task(loader.ensure("large2"))
    await asyncio.sleep(0.2)
    assert not load.done()
    assert host.unloaded == []
    assert loader.statistics().deferrals == 1
    host.loaded["large"] = 0
    await load
    assert [name for name, _ in host.unloaded] == ["large"]

    # the wait is bounded: a large model that stays busy lets the small ones leave after all
    monkeypatch.setattr("inferd.repository.on_demand.DEFER_MAX_S", 0.05)
    host.loaded["large2"] = 1
    await loader.ensure("large")
    assert len(host.unloaded) == 1 + 7
    assert "large2" in host.loaded
    assert loader.statistics().deferrals == 2
