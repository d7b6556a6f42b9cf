"""A large load's transient peak, measured while small loads overlap it: a bound from above
(the peak since its start, plus what unloads gave back meanwhile), where it used to be left
unmeasured and estimated from small models' peak-to-size ratios."""

from __future__ import annotations

import asyncio

from inferd.repository.on_demand import OnDemandLoader, OnDemandSettings
from inferd.testing import FakeClock
from tests.helpers.on_demand import loader_over

BASE = 1000
ROOM = 1000  # a model larger than a quarter of it (250) loads as a large one


class _HighWater:
    """The process's peak resident set since the last reset, as Linux's ``VmHWM`` keeps it."""

    def __init__(self, host: _Host) -> None:
        self.host = host

    def reset(self) -> bool:
        self.host.hwm = self.host.start = self.host.rss
        return True

    def rise(self) -> int | None:
        return self.host.hwm - self.host.start


class _Host:
    """Loads that rise ``size + transient[name]`` and settle at ``size``, each waiting on its
    own gate (open unless the test closes it)."""

    def __init__(self, sizes: dict[str, int], transient: dict[str, int]) -> None:
        self.sizes, self.transient = sizes, transient
        self.disk: dict[str, int] = {}  # files' sizes where not the loaded size
        self.gates = {name: asyncio.Event() for name in sizes}
        for gate in self.gates.values():
            gate.set()
        self.loaded: dict[str, int] = {}
        self.rss = self.hwm = self.start = BASE
        self.clock = FakeClock()

    def _move(self, delta: int) -> None:
        self.rss += delta
        self.hwm = max(self.hwm, self.rss)

    async def load(self, name: str) -> str:
        await self.gates[name].wait()
        self._move(self.sizes[name] + self.transient.get(name, 0))
        self._move(-self.transient.get(name, 0))
        self.loaded[name] = 0
        return "onnxruntime"

    async def unload(self, name: str, reason: str) -> None:
        del self.loaded[name]
        self._move(-self.sizes[name])

    async def estimate(self, name: str) -> int:
        return self.disk.get(name, self.sizes[name])

    def loader(self) -> OnDemandLoader:
        settings = OnDemandSettings(
            budget_bytes=BASE + ROOM, min_residency_s=0.0, eviction="lru", watch_s=0.0
        )
        return loader_over(self, settings, peak=_HighWater(self))


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0.001)


async def _reserved(loader: OnDemandLoader, host: _Host, name: str) -> int:
    """What ``name``'s load reserves, read while it waits at its gate."""
    host.gates[name].clear()
    waiter = asyncio.create_task(loader.ensure(name))
    await _settle()
    reserved = loader.statistics().loading_bytes
    host.gates[name].set()
    await waiter
    return reserved


async def _large_load_overlapped(host: _Host, loader: OnDemandLoader, during: str = "") -> None:
    """``small`` loads alone (its peak, 3 times its size, becomes the runtime's ratio), then
    ``big`` loads while ``slow`` (a small model) is loading: ``big`` does not run alone.
    ``during``: a resident model the test unloads while ``big`` is under way, before it grows."""
    await loader.start()
    await loader.ensure("small")
    if during:
        await loader.ensure(during)
    host.gates["slow"].clear()
    host.gates["big"].clear()
    slow = asyncio.create_task(loader.ensure("slow"))
    await _settle()
    big = asyncio.create_task(loader.ensure("big"))
    await _settle()
    if during:
        await loader.evict_all([during], "big")
    host.gates["big"].set()
    await big
    host.gates["slow"].set()
    await slow
    await loader.evict_all(["big"], "test")


async def test_a_large_load_overlapped_by_small_ones_reserves_its_own_peak_next_time() -> None:
    """``big`` (400) rose 20 above its end while a small load ran beside it. Its next load
    reserves about 420; unmeasured, it reserved its runtime's ratio (3) times its size, capped
    at the room: 1000, the whole room, unloading every small model for a peak of 20."""
    host = _Host({"small": 10, "slow": 10, "big": 400}, {"small": 30, "big": 20})
    loader = host.loader()
    await _large_load_overlapped(host, loader)
    reserved = await _reserved(loader, host, "big")
    assert 420 <= reserved <= 420 + 10 + 30, reserved  # at most the small loads' too


async def test_a_copy_of_a_large_model_reserves_the_bound_its_twin_measured() -> None:
    """``big2``, a copy of ``big`` never loaded, reserves ``big``'s bound, not the runtime's
    ratio times its size."""
    host = _Host({"small": 10, "slow": 10, "big": 400, "big2": 400}, {"small": 30, "big": 20})
    loader = host.loader()
    await _large_load_overlapped(host, loader)
    reserved = await _reserved(loader, host, "big2")
    assert 420 <= reserved <= 420 + 10 + 30, reserved


async def test_memory_freed_during_a_large_load_does_not_hide_its_peak() -> None:
    """``old`` (300) is unloaded while ``big`` loads, before ``big`` grows by 400 and 80 more
    for a while: the peak since ``big``'s start is only 180 above it. The bound adds back what
    the unload gave (300), so ``big``'s next load reserves its peak, 480, not its size alone
    (a load within budget at its size, over it at its peak)."""
    host = _Host({"small": 10, "slow": 10, "old": 300, "big": 400}, {"small": 30, "big": 80})
    loader = host.loader()
    await _large_load_overlapped(host, loader, during="old")
    reserved = await _reserved(loader, host, "big")
    assert 480 <= reserved <= 480 + 10 + 30, reserved


async def test_a_copy_of_a_model_measured_once_is_reserved_at_its_twin_s_size() -> None:
    """``big`` (200 bytes of files) measured 400 at its one load, which was not its runtime's
    first (``small`` loaded before it, with the libraries): ``big2``, a copy never loaded,
    reserves 400, not its files' 200 (a MiniLM copy holds twice its files' size; copies loading
    before any had loaded twice went over the budget by half their size each)."""
    host = _Host({"small": 10, "big": 400, "big2": 400}, {})
    host.disk.update({"big": 200, "big2": 200})
    loader = host.loader()
    await loader.start()
    for name in ("small", "big"):
        await loader.ensure(name)
    assert await _reserved(loader, host, "big2") == 400


async def test_a_copy_is_not_sized_by_a_twin_whose_one_load_carried_its_runtime_s_libraries() -> (
    None
):
    """``big`` was its runtime's first load: its growth (400) held the runtime's libraries, so
    ``big2`` is reserved at its files' size until ``big`` has loaded twice."""
    host = _Host({"big": 400, "big2": 400}, {})
    host.disk.update({"big": 200, "big2": 200})
    loader = host.loader()
    await loader.start()
    await loader.ensure("big")
    assert await _reserved(loader, host, "big2") == 200
