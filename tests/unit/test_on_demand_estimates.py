"""What the on-demand loader reserves for a model never loaded: the size of a copy of it that
was measured, unless that copy's one load also carried its runtime's libraries."""

from __future__ import annotations

import asyncio

from inferd.repository.on_demand import OnDemandLoader, OnDemandSettings
from inferd.testing import FakeClock
from tests.helpers.on_demand import loader_over

BASE = 1000
ROOM = 1000


class _Host:
    """Loads that grow the resident set by the model's size, each waiting on its own gate
    (open unless the test closes it); ``disk``: files' sizes where not the loaded size."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = sizes
        self.disk: dict[str, int] = {}
        self.gates = {name: asyncio.Event() for name in sizes}
        for gate in self.gates.values():
            gate.set()
        self.loaded: dict[str, int] = {}
        self.rss = BASE
        self.clock = FakeClock()

    async def load(self, name: str) -> str:
        await self.gates[name].wait()
        self.rss += self.sizes[name]
        self.loaded[name] = 0
        return "onnxruntime"

    async def unload(self, name: str, reason: str) -> None:
        del self.loaded[name]
        self.rss -= self.sizes[name]

    async def estimate(self, name: str) -> int:
        return self.disk.get(name, self.sizes[name])

    def loader(self) -> OnDemandLoader:
        settings = OnDemandSettings(
            budget_bytes=BASE + ROOM, min_residency_s=0.0, eviction="lru", watch_s=0.0
        )
        return loader_over(self, settings)


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


async def test_a_copy_of_a_model_measured_once_is_reserved_at_its_twin_s_size() -> None:
    """``big`` (200 bytes of files) measured 400 at its one load, which was not its runtime's
    first (``small`` loaded before it, with the libraries): ``big2``, a copy never loaded,
    reserves 400, not its files' 200 (a MiniLM copy holds twice its files' size; copies loading
    before any had loaded twice went over the budget by half their size each)."""
    host = _Host({"small": 10, "big": 400, "big2": 400})
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
    host = _Host({"big": 400, "big2": 400})
    host.disk.update({"big": 200, "big2": 200})
    loader = host.loader()
    await loader.start()
    await loader.ensure("big")
    assert await _reserved(loader, host, "big2") == 200
