"""The on-demand loader against the resident set as measured: memory unloads leave behind,
loads' transient peaks, noisy size measurements; and the policy's spared victims and the
minimum residency of a catalogue's tail (a simulated clock, fake loads)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.errors import UnavailableError
from inferd.repository.eviction import EvictionConfig, Resident, choose_victims
from inferd.repository.memory import GrowthShares, PeakMeter, parse_status_kib
from inferd.repository.on_demand import OnDemandLoader, OnDemandSettings
from inferd.testing import FakeClock
from tests.helpers.on_demand import loader_over


class _Peak:
    """A peak meter whose readings the test sets: how far each model's load rose above its
    end."""

    def __init__(self, host: _Host) -> None:
        self.host = host
        self.resets = 0

    def reset(self) -> bool:
        self.resets += 1
        return True

    def rise(self) -> int | None:
        last = self.host.last_loaded
        return self.host.transient.get(last, 0) + self.host.last_grown


class _Host:
    """Loads that grow the measured resident set by the model's next growth, unloads that
    give back its size less ``residue``."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = sizes
        self.growths: dict[str, list[int]] = {}  # per model, its loads' growths in turn
        self.transient: dict[str, int] = {}
        self.loaded: dict[str, int] = {}
        self.held: dict[str, int] = {}  # what each loaded model added to the resident set
        self.own: dict[str, int] = {}  # what a model holds when its load's growth was not all its
        self.unloaded: list[str] = []
        self.residue = 0
        self.rss = 1000
        self.max_rss = 1000
        self.last_loaded = ""
        self.last_grown = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.clock = FakeClock()

    async def load(self, name: str) -> str:
        await self.gate.wait()
        growth = self.growths.get(name, [])
        grown = growth.pop(0) if growth else self.sizes[name]
        self.max_rss = max(self.max_rss, self.rss + grown + self.transient.get(name, 0))
        self.rss += grown
        self.held[name] = self.own.get(name, grown)
        self.loaded[name] = 0
        self.last_loaded, self.last_grown = name, grown
        return "onnxruntime"

    async def unload(self, name: str, reason: str) -> None:
        del self.loaded[name]
        self.rss -= self.held.pop(name) - self.residue
        self.unloaded.append(name)

    async def estimate(self, name: str) -> int:
        return self.sizes[name]

    def loader(
        self,
        budget: int,
        peak: bool = False,
        release: Callable[[], None] = lambda: None,
        **kw: object,
    ) -> OnDemandLoader:
        kw.setdefault("min_residency_s", 0.0)
        kw.setdefault("eviction", "lru")
        kw.setdefault("watch_s", 0.0)  # the watch between loads: its own test
        return loader_over(
            self,
            OnDemandSettings(budget_bytes=budget, **kw),  # type: ignore[arg-type]
            release=release,
            peak=_Peak(self) if peak else None,
        )


async def _reserved_at_load(loader: OnDemandLoader, host: _Host, name: str) -> int:
    """Load ``name``, held at its start: the bytes it reserved, read while it is under way."""
    host.gate.clear()
    waiter = asyncio.create_task(loader.ensure(name))
    for _ in range(100):
        await asyncio.sleep(0.001)
    reserved = loader.statistics().loading_bytes
    host.gate.set()
    await waiter
    return reserved


async def test_memory_unloads_leave_behind_counts_against_the_budget() -> None:
    """Each unload leaves 50 bytes in the resident set: the loader measures it and unloads one
    model more rather than let the process exceed the budget (counting sizes alone, the fourth
    load took the process to 1300 bytes against 1250)."""
    host = _Host({"a": 100, "b": 100, "c": 100, "d": 100})
    host.residue = 50
    loader = host.loader(1000 + 250)
    await loader.start()
    for name in ("a", "b", "c", "d"):
        await loader.ensure(name)
        host.clock.advance(10**9)
        assert host.rss <= 1250, (name, host.rss)
    assert host.unloaded == ["a", "b", "c"]
    assert host.rss == 1000 + 150 + 100  # three residues and d


async def test_a_load_waits_and_then_says_what_the_process_holds_beyond_its_models() -> None:
    host = _Host({"a": 100, "b": 100})
    # long enough for a load's measurements in threads on a busy machine; b's refusal waits
    # it out
    loader = host.loader(1000 + 150, wait_s=0.5)
    await loader.start()
    await loader.ensure("a")
    host.rss += 100  # the server's own memory grew by 100 (not a model's)
    with pytest.raises(UnavailableError, match="holds 100 bytes beyond its models"):
        await loader.ensure("b")
    assert host.unloaded == []  # even without a, b would not fit: a stays
    host.rss -= 100  # given back: the next request loads
    await loader.ensure("b")
    assert host.unloaded == ["a"]
    assert host.rss <= 1150


async def test_a_load_reserves_its_transient_peak_learned_when_it_ran_alone() -> None:
    """``a`` rose 80 bytes above its end at its first load: its next load reserves 100 + 80,
    so ``b`` leaves first and the peak stays within the budget (the size alone fits both)."""
    host = _Host({"a": 100, "b": 100})
    host.transient["a"] = 80
    loader = host.loader(1000 + 250, peak=True)
    await loader.start()
    await loader.ensure("a")  # nothing else resident: its peak, 1180, fits
    await host.unload("a", "test")  # (as an eviction for another model would)
    await loader.ensure("b")
    host.gate.clear()
    waiter = asyncio.create_task(loader.ensure("a"))
    for _ in range(100):
        await asyncio.sleep(0.001)
    assert loader.statistics().loading_bytes == 180
    assert host.unloaded == ["a", "b"]  # b made room for a's peak
    host.gate.set()
    await waiter
    assert host.max_rss <= 1250


async def test_a_model_size_is_the_median_of_its_last_loads_not_the_largest_ever() -> None:
    """A load that overlapped other growth measured 300 for a 100-byte model: with the median
    of the last three loads, the next two loads bring its size back to 100 (the largest of all
    loads would have kept 300, holding room for two models more)."""
    host = _Host({"a": 10, "b": 10})
    host.growths["a"] = [300, 100, 100]
    loader = host.loader(1000 + 1000)
    await loader.start()
    seen = []
    for _ in range(3):
        await loader.ensure("a")
        seen.append(loader.statistics().resident_bytes["a"])
        await host.unload("a", "test")
    assert seen == [300, 200, 100]


async def test_a_model_size_is_what_its_unloads_give_back_once_it_was_evicted() -> None:
    """``a`` holds 100, but each of its loads overlapped other threads' allocations (freed
    again after it): they measured 300 and 250. Once evicted, its size is what its unload gave
    back (100), and a later load's noisy growth no longer moves it (the loads' median would
    say 175 or more: room held for nothing)."""
    host = _Host({"a": 10, "b": 300})
    host.own["a"] = 100
    host.growths["a"] = [300, 250]
    loader = host.loader(1000 + 350)
    await loader.start()
    sizes = []
    for name, others_freed in (("a", 200), ("b", 0), ("a", 150), ("b", 0)):
        host.clock.advance(10**9)
        await loader.ensure(name)
        host.rss -= others_freed
        sizes.append(int(dict(loader.details("a", "a" in host.loaded))["memory_bytes"]))
    assert host.unloaded == ["a", "b", "a"]
    assert sizes == [300, 100, 100, 100]
    assert host.rss == 1000 + 300  # b alone: nothing held beyond the models


async def test_a_model_never_loaded_is_sized_like_the_measured_model_closest_on_disk() -> None:
    """``a`` (100 bytes of files) measured 300 twice: ``b`` (110 bytes of files, a copy of a
    similar model) reserves 330 at its first load, not its files' 110; ``c``, unlike any
    measured model on disk, reserves its files' size."""
    host = _Host({"a": 100, "b": 110, "c": 1000})
    host.growths["a"] = [300, 300]
    loader = host.loader(1000 + 5000)
    await loader.start()
    await loader.ensure("a")
    await host.unload("a", "test")
    await loader.ensure("a")
    for name, reserved in (("b", 330), ("c", 1000)):
        host.gate.clear()
        waiter = asyncio.create_task(loader.ensure(name))
        for _ in range(100):
            await asyncio.sleep(0.001)
        assert loader.statistics().loading_bytes == reserved, name
        host.gate.set()
        await waiter


async def test_between_loads_the_process_over_budget_trims_then_unloads_idle_models() -> None:
    """The resident set grows by 120 with no load under way (inference buffers, memory freed
    late): the watch trims the allocator (which gives back 20 here) and unloads the least
    recently used idle model to bring the process within the budget; nothing while it fits."""
    host = _Host({"a": 100, "b": 100})
    trims: list[int] = []  # the resident set at each trim once it grew

    def release() -> None:
        if host.rss > 1200:
            trims.append(host.rss)
            host.rss -= 20 if len(trims) == 1 else 0

    loader = OnDemandLoader(
        OnDemandSettings(
            budget_bytes=1000 + 250, min_residency_s=0.0, eviction="lru", watch_s=0.01
        ),
        load=host.load,
        unload=host.unload,
        loaded=lambda: dict(host.loaded),
        estimate=host.estimate,
        measure=lambda: host.rss,
        release=release,
        clock=host.clock,
    )
    await loader.start()
    await loader.ensure("a")
    host.clock.advance(10**9)
    await loader.ensure("b")
    for _ in range(20):
        await asyncio.sleep(0.01)
    assert host.unloaded == []  # within the budget: nothing leaves
    host.rss += 120
    for _ in range(200):
        await asyncio.sleep(0.01)
        if host.unloaded:
            break
    assert host.unloaded == ["a"]
    assert trims[0] == 1000 + 200 + 120  # trimmed before anything left
    assert host.rss == 1000 + 100 + 100  # b and the 100 not given back
    await loader.close()


async def test_the_watch_unloads_what_may_leave_when_that_cannot_bring_it_within_budget() -> None:
    """Over the budget by more than the one idle model holds (the other is pinned): the watch
    unloads the idle one all the same, which brings the process closer to the budget, and
    leaves the pinned one."""
    host = _Host({"a": 100, "b": 100})
    loader = OnDemandLoader(
        OnDemandSettings(
            budget_bytes=1000 + 250,
            pins=frozenset({"a"}),
            min_residency_s=0.0,
            eviction="cost",
            watch_s=0.01,
        ),
        load=host.load,
        unload=host.unload,
        loaded=lambda: dict(host.loaded),
        estimate=host.estimate,
        measure=lambda: host.rss,
        release=lambda: None,
        clock=host.clock,
    )
    await loader.start()
    await loader.ensure("a")
    await loader.ensure("b")
    host.clock.advance(10**9)
    host.rss += 200  # 400 beyond the baseline: b's 100 alone cannot bring it within 250
    for _ in range(200):
        await asyncio.sleep(0.01)
        if host.unloaded:
            break
    assert host.unloaded == ["b"]
    assert sorted(host.loaded) == ["a"]
    assert host.rss == 1000 + 100 + 200
    await loader.close()


async def test_a_first_load_that_measured_its_runtimes_libraries_is_resized_at_its_unload() -> None:
    """``a``, the first model of its runtime, grew the process by 300 (200 of them the
    runtime's libraries): its unload gives back 100 only; from then on it counts 100 and the
    libraries count once, as what the process holds beyond its models (counted in its size as
    well, a's next load would need 300 + the 200 still held: more than the budget, never)."""
    host = _Host({"a": 100, "b": 150})
    host.growths["a"] = [300, 100]
    loader = host.loader(1000 + 400, wait_s=1.0)
    await loader.start()
    await loader.ensure("a")
    host.residue = 200  # the libraries stay
    host.clock.advance(10**9)
    await loader.ensure("b")
    assert host.unloaded == ["a"]
    assert dict(loader.details("a", False))["memory_bytes"] == "100"
    host.residue = 0
    host.clock.advance(10**9)
    await loader.ensure("a")  # 200 + a 100 fit in 400 once b leaves (not 200 + 300)
    assert host.unloaded == ["a", "b"]
    assert sorted(host.loaded) == ["a"]
    assert host.rss <= 1400


# -- the policy ----------------------------------------------------------------------------------


def test_cost_spares_the_small_victims_a_large_one_makes_unneeded() -> None:
    """The two least worth keeping are a small model and a large one; the large one alone
    makes room, so the small one stays (taking both, in order, evicted it for nothing)."""
    cfg = EvictionConfig(0.0, "cost")
    resident = [
        Resident("small", 10, last_used_s=0, loaded_at_s=0, heat=0.1, reload_s=0.01),
        Resident("large", 100, last_used_s=0, loaded_at_s=0, heat=1.0, reload_s=0.1),
        Resident("hot", 10, last_used_s=0, loaded_at_s=0, heat=100.0, reload_s=0.01),
    ]
    choice = choose_victims(resident, 100, 150, 1.0, cfg)
    assert choice.fits
    assert choice.victims == ["large"]
    choice = choose_victims(resident, 100, 110, 1.0, cfg)  # now both are needed
    assert choice.victims == ["small", "large"]


def test_cost_holds_only_a_young_model_that_thrashes_lru_every_young_one() -> None:
    """With ``cost`` the minimum residency holds a young model only if it loaded again less
    than the residency after its eviction (it thrashes) and is asked for at least twice per
    residency (``eviction.HOLD_MIN_REQUESTS``), and only against a load that cannot fit without
    it; a young model loaded for the first time, or long after its eviction, may leave."""
    cfg = EvictionConfig(10.0, "cost")
    first = Resident("tail", 50, last_used_s=5, loaded_at_s=5, heat=3.0, reload_s=0.1)
    late = Resident(
        "late", 50, last_used_s=5, loaded_at_s=5, heat=3.0, reload_s=0.1, reloaded_after_s=10.0
    )
    thrash = Resident(
        "hot", 50, last_used_s=5, loaded_at_s=5, heat=20.0, reload_s=0.1, reloaded_after_s=0.5
    )
    assert choose_victims([first, thrash], 50, 100, 6.0, cfg).victims == ["tail"]
    assert choose_victims([late, thrash], 50, 100, 6.0, cfg).victims == ["late"]
    refused = choose_victims([thrash], 100, 100, 6.0, cfg)
    assert not refused.fits
    assert refused.held_by_residency == ["hot"]
    assert choose_victims([thrash], 100, 100, 15.0, cfg).victims == ["hot"]  # residency over
    # lru keeps the residency for every young model
    lru = EvictionConfig(10.0, "lru")
    assert choose_victims([first, thrash], 50, 100, 6.0, lru).held_by_residency == [
        "hot",
        "tail",
    ]


async def test_cost_holds_a_model_evicted_and_loaded_again_within_the_residency() -> None:
    """Two models that do not fit together, asked for in turn: the first swap happens (neither
    thrashed yet), then 'a', asked for often, evicted and loaded again at once, is held for the
    residency, so 'b' waits instead of evicting it; once the residency ran out 'b' loads."""
    host = _Host({"a": 100, "b": 100})
    loader = host.loader(1000 + 150, min_residency_s=10.0, eviction="cost", wait_s=0.5)
    await loader.start()
    await loader.ensure("a")
    for _ in range(10):  # asked for often (twice per residency: hot), but not a thrash yet
        loader.touch("a")
    await loader.ensure("b")  # 'a' loaded for the first time: it may leave
    host.clock.advance(10**8)
    await loader.ensure("a")  # 'b' too; 'a' is back 0.1 s after its eviction
    with pytest.raises(UnavailableError, match="cannot load now"):
        await loader.ensure("b")
    assert host.unloaded == ["a", "b"]
    assert loader.statistics().thrash_refusals == 1
    host.clock.advance(11 * 10**9)
    await loader.ensure("b")
    assert host.unloaded == ["a", "b", "a"]
    await loader.close()


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 100), min_size=2, max_size=12),
    heats=st.lists(st.floats(0.0, 50.0), min_size=12, max_size=12),
    need=st.integers(1, 200),
    budget=st.integers(50, 600),
)
def test_spared_victims_are_a_minimal_set_that_frees_enough(
    sizes: list[int], heats: list[float], need: int, budget: int
) -> None:
    """Whatever the sizes and heats: the victims free enough for the load and none of them
    could have stayed."""
    cfg = EvictionConfig(0.0, "cost")
    resident = [
        Resident(f"m{k}", s, last_used_s=0, loaded_at_s=0, heat=heats[k], reload_s=0.1)
        for k, s in enumerate(sizes)
    ]
    choice = choose_victims(resident, need, budget, 1.0, cfg)
    used = sum(sizes)
    if not choice.fits:
        assert need > budget or used + need - budget > used
        return
    by_name = {r.name: r.size_bytes for r in resident}
    freed = sum(by_name[v] for v in choice.victims)
    assert used - freed + need <= budget
    for v in choice.victims:
        assert used - freed + by_name[v] + need > budget, f"{v} need not have left"


# -- measuring -----------------------------------------------------------------------------------


def test_the_peak_meter_sees_memory_held_and_given_back_since_its_reset() -> None:
    meter = PeakMeter()
    if not meter.reset():
        pytest.skip("/proc/self/clear_refs cannot be written here")
    block = np.ones(64 << 20, dtype=np.uint8)  # 64 MiB, touched
    del block
    rise = meter.rise()
    assert rise is not None
    assert rise >= 48 << 20
    assert meter.reset()
    after = meter.rise()
    assert after is not None
    assert after < 16 << 20


def test_the_peak_meter_does_not_count_memory_freed_since_its_reset() -> None:
    """Memory freed after the reset (a model torn down late) lowers the resident set, not the
    peak: it is not read as a rise."""
    held = np.ones(64 << 20, dtype=np.uint8)  # 64 MiB, touched, then freed after the reset
    meter = PeakMeter()
    if not meter.reset():
        pytest.skip("/proc/self/clear_refs cannot be written here")
    del held
    rise = meter.rise()
    assert rise is not None
    assert rise < 16 << 20


def test_status_fields_are_read_in_bytes_of_kib_and_a_missing_one_is_an_error() -> None:
    text = "Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n"
    assert parse_status_kib(text, ("VmHWM", "VmRSS")) == {"VmHWM": 204800, "VmRSS": 102400}
    with pytest.raises(ValueError, match="VmSwap"):
        parse_status_kib(text, ("VmSwap",))


def test_what_a_loads_trim_gives_back_is_charged_to_that_load_alone() -> None:
    """Two loads overlap; the first one's end trims the allocator, which gives back 50: that
    drop is the first load's transient, not a shrinking of the second (split among both, it
    had measured a large model by a fraction of its size)."""
    shares = GrowthShares()
    shares.begin("a", 100, 1000)
    shares.begin("b", 300, 1100)  # a grew 100 alone
    shares.observe(1500)  # 400 more while both ran: a 200, b 300
    shares.charge("a", 1450)  # a's trim gave back 50
    assert shares.end("a", 1450) == 150
    assert shares.end("b", 1450) == 300


async def test_memory_an_eviction_frees_during_a_load_is_not_its_transient_peak() -> None:
    """While ``a`` loads alone, the watch unloads ``big``: the meter's peak now stands 250
    above the end, all of it ``big``'s. ``a``'s next load reserves its size (100), not 350,
    and no other model's estimate learns a ratio of 2.5 from it."""
    host = _Host({"a": 100, "big": 250, "c": 100})
    loader = host.loader(1000 + 1000, peak=True)
    await loader.start()
    await loader.ensure("big")
    host.gate.clear()
    waiter = asyncio.create_task(loader.ensure("a"))
    for _ in range(100):
        await asyncio.sleep(0.001)
    await loader.evict_all(["big"], "")
    host.transient["a"] = 250  # what the meter reads at a's end
    host.gate.set()
    await waiter
    del host.transient["a"]  # its later loads rise nothing above their end
    await host.unload("a", "test")
    for name in ("a", "c"):
        assert await _reserved_at_load(loader, host, name) == 100, name


async def test_a_model_never_measured_reserves_its_runtime_s_median_transient() -> None:
    """Three loads alone rose 10, 10 and 300 above their end: a model of the same runtime whose
    own peak is unknown, and no copy of them (twice their size on disk), reserves the median
    ratio (0.1 x 200), not the largest (3 x 200)."""
    host = _Host({"a": 100, "b": 100, "c": 100, "d": 200})
    host.transient.update({"a": 10, "b": 10, "c": 300})
    loader = host.loader(1000 + 5000, peak=True)
    await loader.start()
    for name in ("a", "b", "c"):
        await loader.ensure(name)
    assert await _reserved_at_load(loader, host, "d") == 200 + 20


async def test_an_unload_drop_far_beyond_the_model_is_not_taken_as_its_size() -> None:
    """``a`` (10 bytes) is evicted while 150 bytes that were not its own are given back in the
    same moment: its size stays 10 (taking the drop, each of its loads would reserve 160). A
    drop within reach of what its loads grew is taken."""
    host = _Host({"a": 10, "b": 100})
    loader = host.loader(1000 + 105)
    await loader.start()
    await loader.ensure("a")
    host.clock.advance(10**9)
    host.residue = -150  # the unload's window also sees 150 bytes freed elsewhere
    await loader.ensure("b")
    assert host.unloaded == ["a"]
    assert dict(loader.details("a", False))["memory_bytes"] == "10"
    host.residue = -20  # 30 freed: within reach of its growth, taken
    host.rss += 150  # (what was freed elsewhere came back)
    host.clock.advance(10**9)
    await loader.ensure("a")
    assert host.unloaded == ["a", "b"]
    assert dict(loader.details("b", False))["memory_bytes"] == "120"


async def test_a_copy_never_measured_reserves_its_twin_s_transient_not_its_runtime_s() -> None:
    """``big`` (1000 bytes of files) rose 200 above its end, the small ``s`` 3 times its size:
    ``big2``, a copy of ``big`` whose own peak is unknown, reserves 1000 + 200, not its
    runtime's median ratio times its size (1000 + 1600)."""
    host = _Host({"big": 1000, "s": 10, "big2": 1000})
    host.transient.update({"big": 200, "s": 30})
    loader = host.loader(1000 + 5000, peak=True)
    await loader.start()
    for name in ("big", "s"):
        await loader.ensure(name)
    assert await _reserved_at_load(loader, host, "big2") == 1000 + 200


async def _peak_known_and_a_busy(transient: int, beyond: int = 0) -> tuple[_Host, OnDemandLoader]:
    """A budget of 250 bytes of room; ``b`` (100) loaded alone once and rose ``transient``
    above its end, then left; the process holds ``beyond`` bytes more than its models; ``a``
    (100) is loaded and serving a request."""
    host = _Host({"a": 100, "b": 100})
    host.transient["b"] = transient
    loader = host.loader(1000 + 250, peak=True)
    await loader.start()
    await loader.ensure("b")
    await host.unload("b", "test")
    host.rss += beyond
    host.max_rss = host.rss
    await loader.ensure("a")
    host.loaded["a"] = 1  # a request in flight
    return host, loader


async def test_a_load_whose_peak_does_not_fit_waits_briefly_for_a_busy_model() -> None:
    """``b``'s peak (100 + 80) fits only without ``a``, which is serving a request: ``b``
    waits for it rather than load at once with its size alone reserved (its peak, 1280, then
    over the 1250 budget); once ``a`` is idle it leaves and ``b`` loads within the budget."""
    host, loader = await _peak_known_and_a_busy(80)
    waiter = asyncio.create_task(loader.ensure("b"))
    await asyncio.sleep(0.1)
    assert not waiter.done()
    host.loaded["a"] = 0
    await waiter
    assert host.unloaded == ["b", "a"]
    assert host.max_rss <= 1250


async def test_a_peak_that_could_never_fit_is_not_waited_for() -> None:
    """``b`` rose 500 above its end when it loaded alone; the process now holds 50 bytes
    beyond its models (a runtime's libraries, say). ``b``'s peak cannot fit in the 250 bytes
    of room even once every model has left, so waiting for the busy ``a`` to go idle cannot
    help: ``b`` loads at once with its size alone reserved (it used to wait up to a second)."""
    host, loader = await _peak_known_and_a_busy(500, beyond=50)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await loader.ensure("b")
    assert loop.time() - started < 0.5
    assert sorted(host.loaded) == ["a", "b"]


async def test_back_to_back_unloads_trim_once_each_and_memory_kept_meanwhile_is_trimmed_first() -> (
    None
):
    """``d`` needs the room of ``a``, ``b`` and ``c``: three unloads in a row, with nothing
    moving the resident set between them. Each trims once, after its unload (before it, the
    previous trim left nothing to give back: a trim walks every free chunk of the heap, tens of
    milliseconds in a fragmented one). When the allocator kept 50 MiB since the last trim (a
    request's buffers, freed), the next unload trims first, so the drop it measures is the
    victim's 250 MiB alone."""
    mib = 1 << 20
    host = _Host({"a": 100 * mib, "b": 100 * mib, "c": 100 * mib, "d": 250 * mib, "e": 100 * mib})
    host.rss = host.max_rss = 1000 * mib
    kept = {"bytes": 0}
    trims: list[int] = []

    def release() -> None:
        trims.append(host.rss)
        host.rss -= kept["bytes"]
        kept["bytes"] = 0

    loader = host.loader(1300 * mib, release=release)
    await loader.start()
    for name in ("a", "b", "c"):
        await loader.ensure(name)
        host.clock.advance(10**9)
    trims.clear()
    await loader.ensure("d")
    assert host.unloaded == ["a", "b", "c"]
    assert len(trims) == 3 + 1  # one after each unload, one at the end of d's load
    host.clock.advance(10**9)

    host.rss += 50 * mib  # freed by requests, kept by the allocator until a trim
    kept["bytes"] = 50 * mib
    trims.clear()
    await loader.ensure("e")
    assert host.unloaded[-1] == "d"
    assert trims[0] == (1000 + 250 + 50) * mib  # before the unload: the kept bytes go back first
    assert len(trims) == 2 + 1  # before and after d's unload, at the end of e's load
    assert int(dict(loader.details("d", False))["memory_bytes"]) == 250 * mib
    assert host.rss == (1000 + 100) * mib
    await loader.close()


async def _until(condition: Callable[[], bool]) -> None:
    """Wait until ``condition`` holds (a load's start takes a few thread hops: up to 2 s on a
    busy machine)."""
    for _ in range(400):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


class _GatedHost(_Host):
    """``_Host`` with a gate per model, and for each load the loads it ran beside."""

    def __init__(self, sizes: dict[str, int]) -> None:
        super().__init__(sizes)
        self.gates = {name: asyncio.Event() for name in sizes}
        for gate in self.gates.values():
            gate.set()
        self.running: set[str] = set()
        self.beside: dict[str, set[str]] = {}
        self.began: list[str] = []

    async def load(self, name: str) -> str:
        self.began.append(name)
        self.beside[name] = set(self.running)
        for other in self.running:
            self.beside[other].add(name)
        self.running.add(name)
        try:
            await self.gates[name].wait()
            return await super().load(name)
        finally:
            self.running.discard(name)


async def test_a_large_model_loads_alone_until_its_peak_is_measured() -> None:
    """``big`` (400 of a 1000-byte room) has never loaded and no copy of it has: its load waits
    for ``s1``'s load to end and ``s2``'s waits for it, so the peak the meter reads is its own
    (beside small loads, its peak was estimated from their ratios: 500 MiB for a MiniLM copy
    whose own is 0-14 MiB). ``big2``, a copy, then loads beside ``s3``: its peak is known."""
    host = _GatedHost({"s1": 10, "s2": 10, "s3": 10, "big": 400, "big2": 400})
    host.transient.update({"big": 20, "big2": 20})
    loader = host.loader(1000 + 1000, peak=True, load_threads=4)
    await loader.start()
    host.gates["s1"].clear()
    s1 = asyncio.create_task(loader.ensure("s1"))
    await _until(lambda: "s1" in host.running)
    big = asyncio.create_task(loader.ensure("big"))
    await asyncio.sleep(0.01)
    s2 = asyncio.create_task(loader.ensure("s2"))
    await asyncio.sleep(0.01)
    assert host.began == ["s1"]  # big waits for s1's load to end; s2 waits for big
    host.gates["s1"].set()
    await asyncio.gather(s1, big, s2)
    assert host.began == ["s1", "big", "s2"]
    assert host.beside["big"] == set()
    host.gates["s3"].clear()
    s3 = asyncio.create_task(loader.ensure("s3"))
    await _until(lambda: "s3" in host.running)
    await loader.ensure("big2")
    assert host.beside["big2"] == {"s3"}
    host.gates["s3"].set()
    await s3
