"""The order in which waiting on-demand loads take the load threads: the model that loses the
most requests per second of loading first (its recent and waiting requests over its load
time), a load that waited past the patience first of all, never more loads than threads."""

from __future__ import annotations

import asyncio
import random

import pytest

from inferd.repository.load_gate import LoadGate
from inferd.repository.on_demand import OnDemandLoader, OnDemandSettings
from inferd.testing import FakeClock


async def _order(gate: LoadGate, names: list[str], hold: str = "first") -> list[str]:
    """Hold the one thread with ``hold``, queue ``names`` in that order, release: the order in
    which they got the thread."""
    got: list[str] = []
    release = asyncio.Event()

    async def holder() -> None:
        async with gate.slot(hold):
            await release.wait()

    async def load(name: str) -> None:
        async with gate.slot(name):
            got.append(name)
            await asyncio.sleep(0)

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    tasks = []
    for name in names:
        tasks.append(asyncio.create_task(load(name)))
        await asyncio.sleep(0)
    release.set()
    await asyncio.gather(first, *tasks)
    return got


async def test_the_model_asked_for_most_loads_first_not_the_first_to_ask() -> None:
    demand = {"rare": 1.0, "hot": 10.0, "warm": 5.0}
    gate = LoadGate(1, lambda n: demand.get(n, 0.0), patience_s=60.0)
    assert await _order(gate, ["rare", "hot", "warm"]) == ["hot", "warm", "rare"]


async def test_a_model_that_loads_faster_goes_first_at_equal_demand() -> None:
    """``slow`` held the thread 50 ms at its last load, ``quick`` almost nothing: a second of
    loading ``quick`` serves more waiting requests."""
    gate = LoadGate(1, lambda n: 1.0, patience_s=60.0)
    for name, seconds in (("slow", 0.05), ("quick", 0.0)):
        async with gate.slot(name):
            await asyncio.sleep(seconds)
    assert await _order(gate, ["slow", "quick"]) == ["quick", "slow"]


async def test_with_nothing_known_loads_go_in_the_order_they_came() -> None:
    gate = LoadGate(1, lambda n: 0.0, patience_s=60.0)
    assert await _order(gate, ["a", "b", "c"]) == ["a", "b", "c"]


async def test_a_load_that_waited_past_the_patience_goes_before_any_other() -> None:
    """``rare`` has waited longer than the patience: it goes before ``hot``, however much more
    ``hot`` is asked for (a model in the tail still loads within its requests' wait)."""
    demand = {"rare": 0.0, "hot": 100.0}
    gate = LoadGate(1, lambda n: demand.get(n, 0.0), patience_s=0.05)
    got: list[str] = []
    release = asyncio.Event()

    async def holder() -> None:
        async with gate.slot("first"):
            await release.wait()

    async def load(name: str) -> None:
        async with gate.slot(name):
            got.append(name)

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    rare = asyncio.create_task(load("rare"))
    await asyncio.sleep(0.1)  # past the patience
    hot = asyncio.create_task(load("hot"))
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(first, rare, hot)
    assert got == ["rare", "hot"]


async def test_the_loader_loads_the_model_with_most_waiting_requests_first() -> None:
    """One load thread, held by ``a``'s load; then one request for ``b``, one for ``c`` and
    five for ``hot``: ``hot`` loads next (first come, first served loaded ``b`` and ``c``
    first while its five requests waited)."""
    order: list[str] = []
    gate = asyncio.Event()
    loaded: dict[str, int] = {}

    async def load(name: str) -> str:
        if name == "a":
            await gate.wait()
        order.append(name)
        loaded[name] = 0
        return "onnxruntime"

    async def unload(name: str, reason: str) -> None:
        loaded.pop(name, None)

    async def estimate(name: str) -> int:
        return 10

    loader = OnDemandLoader(
        OnDemandSettings(budget_bytes=None, load_threads=1, watch_s=0.0),
        load=load,
        unload=unload,
        loaded=lambda: dict(loaded),
        estimate=estimate,
        measure=lambda: 1000,
        clock=FakeClock(),
    )
    await loader.start()
    waiters = [asyncio.create_task(loader.ensure("a"))]
    await asyncio.sleep(0.01)
    for name in ["b", "c"] + ["hot"] * 5:
        waiters.append(asyncio.create_task(loader.ensure(name)))
        await asyncio.sleep(0.01)
    gate.set()
    await asyncio.gather(*waiters)
    assert order == ["a", "hot", "b", "c"]


async def test_a_load_that_runs_alone_waits_for_the_loads_under_way_and_none_joins_it() -> None:
    """Three threads, ``a`` and ``b`` loading; ``big`` asks to run alone, then ``c`` comes
    (worth less): when ``a`` ends, its thread waits for ``big`` rather than go to ``c``;
    ``big`` starts once ``b`` has ended too, and ``c`` only after ``big``."""
    demand = {"big": 5.0, "c": 1.0}
    gate = LoadGate(3, lambda n: demand.get(n, 0.0), patience_s=60.0)
    events: list[str] = []
    ends = {name: asyncio.Event() for name in ("a", "b", "big")}

    async def load(name: str, alone: bool = False) -> None:
        async with gate.slot(name, alone=alone):
            events.append(f"+{name}")
            if name in ends:
                await ends[name].wait()
            events.append(f"-{name}")

    tasks = [asyncio.create_task(load("a")), asyncio.create_task(load("b"))]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(load("big", alone=True)))
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(load("c")))
    for name in ("a", "b", "big"):
        await asyncio.sleep(0.01)
        ends[name].set()
    await asyncio.gather(*tasks)
    assert events == ["+a", "+b", "-a", "-b", "+big", "-big", "+c", "-c"]


async def _big_behind_a_then(
    third: str, demand: dict[str, float]
) -> tuple[LoadGate, list[str], asyncio.Event, list[asyncio.Task[None]]]:
    """Two threads: ``a`` holds one until the event is set, ``big`` asks to run alone, then
    ``third`` asks for a thread; the gate, the loads in the order they got their threads, the
    event and the tasks (``a``, ``big``, ``third``)."""
    gate = LoadGate(2, lambda n: demand.get(n, 0.0), patience_s=60.0)
    release = asyncio.Event()
    got: list[str] = []

    async def load(name: str, alone: bool = False) -> None:
        async with gate.slot(name, alone=alone):
            got.append(name)
            if name == "a":
                await release.wait()

    tasks = [asyncio.create_task(load("a"))]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(load("big", alone=True)))
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(load(third)))
    await asyncio.sleep(0.01)
    return gate, got, release, tasks


async def test_a_load_worth_more_than_the_one_that_runs_alone_takes_a_free_thread() -> None:
    """``big`` waits to run alone behind ``a``; ``hot``, worth more, comes while a thread is
    free: it loads at once (the threads wait only for the load chosen to go next)."""
    _, got, release, tasks = await _big_behind_a_then("hot", {"big": 1.0, "hot": 50.0})
    assert got == ["a", "hot"]
    release.set()
    await asyncio.gather(*tasks)
    assert got == ["a", "hot", "big"]


async def test_a_cancelled_load_that_was_to_run_alone_gives_the_held_threads_back() -> None:
    gate, got, release, tasks = await _big_behind_a_then("c", {"big": 5.0, "c": 1.0})
    assert got == ["a"]  # the free thread waits for big
    tasks[1].cancel()
    await asyncio.sleep(0.01)
    assert got == ["a", "c"]
    release.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert gate.waiting() == 0


@pytest.mark.parametrize("alone_loads", [0, 8])
async def test_never_more_loads_than_threads_none_beside_one_alone_and_all_served(
    alone_loads: int,
) -> None:
    """Random demands, durations, cancellations, and ``alone_loads`` of the 40 loads alone:
    never more than 3 loads at once, never one beside a load that runs alone, every load not
    cancelled served; a cancelled one takes no thread and leaks none."""
    rng = random.Random(11)
    demand = {f"m{k}": rng.random() * 10 for k in range(40)}
    alone = set(rng.sample(sorted(demand), alone_loads))
    gate = LoadGate(3, demand.__getitem__, patience_s=0.02)
    holding: set[str] = set()
    peak = 0
    done: list[str] = []

    async def load(name: str) -> None:
        nonlocal peak
        async with gate.slot(name, alone=name in alone):
            assert not (holding & alone), (name, holding)
            assert not holding or name not in alone, (name, holding)
            holding.add(name)
            peak = max(peak, len(holding))
            try:
                await asyncio.sleep(rng.random() * 0.005)
            finally:  # (cancelled while it holds its thread: gone all the same)
                holding.discard(name)
            done.append(name)

    tasks = {name: asyncio.create_task(load(name)) for name in demand}
    await asyncio.sleep(0.001)
    cancelled = set(rng.sample(sorted(demand), 8))
    for name in cancelled:
        tasks[name].cancel()
    results = await asyncio.gather(*tasks.values(), return_exceptions=True)
    assert not [r for r in results if isinstance(r, AssertionError)]
    assert peak <= 3
    assert set(done) >= set(demand) - cancelled
    assert gate.waiting() == 0
    async with gate.slot("x", alone=True):  # every thread came back
        assert gate.waiting() == 0
