"""The hand-off between the event loop and the instances: inline runs of short batches,
direct hand-off to an idle instance, the backlog, and nothing lost under concurrent submits."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferd.backends.base import Result
from inferd.core.inference import InferRequest
from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.scheduling.direct import DirectScheduler
from inferd.scheduling.instances import (
    INLINE_WARM_UP,
    SAMPLE_EVERY,
    SETTLED_SAMPLES,
    InstancePool,
)
from inferd.scheduling.stats import ModelStats


@dataclass
class _Echo:
    """Echoes INPUT0 and records the thread of each batch; a negative value fails its request."""

    inline_safe: bool = True
    threads: list[int] = field(default_factory=list)
    batches: list[list[float]] = field(default_factory=list)
    closed: bool = False

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        self.threads.append(threading.get_ident())
        self.batches.append([float(r.inputs["INPUT0"][0, 0]) for r in requests])
        out: list[Result] = []
        for r in requests:
            value = r.inputs["INPUT0"]
            if value[0, 0] < 0:
                out.append(InvalidArgumentError(f"negative input {value[0, 0]}"))
            else:
                out.append({"OUTPUT0": value * 2})
        return out

    def close(self) -> None:
        self.closed = True


class _SlowCpu:
    """A CPU clock on which every reading is 1 ms after the last: each batch seems to cost a
    millisecond of CPU."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 1_000_000
        return self.now


def _request(value: float) -> InferRequest:
    return InferRequest("m", {"INPUT0": np.full((1, 2), value, np.float32)})


async def _serve(instances: list[_Echo], values: list[float], *, bound_ns: int) -> list[object]:
    loop = asyncio.get_running_loop()
    stats = ModelStats("m", 1)
    pool = InstancePool("m", instances, stats, loop, inline_bound_ns=bound_ns)
    scheduler = DirectScheduler(pool, stats)
    try:
        results = await asyncio.gather(
            *(scheduler.submit(_request(v)) for v in values), return_exceptions=True
        )
    finally:
        await asyncio.to_thread(pool.close)
    return results


async def test_short_batches_run_on_the_loop_thread_after_warm_up() -> None:
    echo = _Echo()
    loop_thread = threading.get_ident()
    for value in range(INLINE_WARM_UP + 5):  # one at a time: each is measured before the next
        await _serve_one(echo, float(value), bound_ns=10**12)
    assert loop_thread not in echo.threads[:INLINE_WARM_UP]  # measured on the instance thread
    assert echo.threads[INLINE_WARM_UP:] == [loop_thread] * 5


async def _serve_one(echo: _Echo, value: float, *, bound_ns: int) -> None:
    # one pool for the whole test, kept on the function so the estimate carries over
    pool = _POOLS.get(id(echo))
    if pool is None:
        stats = ModelStats("m", 1)
        loop = asyncio.get_running_loop()
        pool = InstancePool("m", [echo], stats, loop, inline_bound_ns=bound_ns)
        _POOLS[id(echo)] = pool
    scheduler = DirectScheduler(pool, ModelStats("m", 1))
    result = await scheduler.submit(_request(value))
    assert np.array_equal(result["OUTPUT0"], np.full((1, 2), value * 2, np.float32))


_POOLS: dict[int, InstancePool] = {}


@pytest.fixture(autouse=True)
async def _close_pools() -> None:  # type: ignore[misc]
    yield
    for pool in _POOLS.values():
        await asyncio.to_thread(pool.close)
    _POOLS.clear()


@pytest.mark.parametrize("bound_ns", [0, 100_000], ids=["inline off", "batches too long"])
async def test_batches_stay_on_the_instance_threads(bound_ns: int) -> None:
    echo = _Echo()
    loop = asyncio.get_running_loop()
    stats = ModelStats("m", 1)
    # with the slow CPU clock every batch measures 1 ms, over the 100 µs bound
    pool = InstancePool("m", [echo], stats, loop, inline_bound_ns=bound_ns, cpu_clock=_SlowCpu())
    scheduler = DirectScheduler(pool, stats)
    try:
        for value in range(INLINE_WARM_UP * 2):
            await scheduler.submit(_request(float(value)))
    finally:
        await asyncio.to_thread(pool.close)
    assert threading.get_ident() not in echo.threads
    assert len(echo.threads) == INLINE_WARM_UP * 2


async def test_the_cpu_clock_is_read_for_every_batch_until_the_estimate_settles() -> None:
    echo = _Echo()
    loop = asyncio.get_running_loop()
    stats = ModelStats("m", 1)
    clock = _SlowCpu()
    pool = InstancePool("m", [echo], stats, loop, inline_bound_ns=0, cpu_clock=clock)
    scheduler = DirectScheduler(pool, stats)
    extra = 2 * SAMPLE_EVERY
    try:
        for value in range(SETTLED_SAMPLES + extra):
            await scheduler.submit(_request(float(value)))
    finally:
        await asyncio.to_thread(pool.close)
    readings = clock.now // 1_000_000
    # two readings per measured batch: every one of the first SETTLED_SAMPLES, then one in
    # SAMPLE_EVERY
    assert readings == 2 * (SETTLED_SAMPLES + extra // SAMPLE_EVERY)
    assert len(echo.threads) == SETTLED_SAMPLES + extra  # every batch ran


async def test_an_instance_that_is_not_inline_safe_never_runs_on_the_loop() -> None:
    echo = _Echo(inline_safe=False)
    for value in range(INLINE_WARM_UP * 2):
        await _serve_one(echo, float(value), bound_ns=10**12)
    assert threading.get_ident() not in echo.threads


async def test_work_put_while_every_instance_is_busy_runs_in_order() -> None:
    echo = _Echo(inline_safe=False)
    values = [float(v) for v in range(40)]
    results = await _serve([echo], values, bound_ns=0)
    assert [float(r["OUTPUT0"][0, 0]) for r in results] == [v * 2 for v in values]  # type: ignore[index]
    assert [v for batch in echo.batches for v in batch] == values


async def test_an_inline_run_on_a_closed_instance_answers_unavailable() -> None:
    echo = _Echo()
    loop = asyncio.get_running_loop()
    stats = ModelStats("m", 1)
    pool = InstancePool("m", [echo], stats, loop, inline_bound_ns=10**12)
    scheduler = DirectScheduler(pool, stats)
    for value in range(INLINE_WARM_UP):
        await scheduler.submit(_request(float(value)))
    await asyncio.to_thread(pool.close)
    assert echo.closed
    with pytest.raises(UnavailableError, match="unloading"):
        await scheduler.submit(_request(1.0))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    instances=st.integers(1, 4),
    inline=st.lists(st.booleans(), min_size=4, max_size=4),
    values=st.lists(st.integers(-3, 50).map(float), min_size=1, max_size=60),
    bound_ns=st.sampled_from([0, 10**12]),
)
def test_every_request_gets_its_own_answer_exactly_once(
    instances: int, inline: list[bool], values: list[float], bound_ns: int
) -> None:
    """Many concurrent submits over instance threads and inline runs: each request is answered
    once, with its own result or its own error, and each ran exactly once."""
    echoes = [_Echo(inline_safe=inline[i]) for i in range(instances)]
    results = asyncio.run(_serve(echoes, values, bound_ns=bound_ns))
    for value, result in zip(values, results, strict=True):
        if value < 0:
            assert isinstance(result, InvalidArgumentError)
            assert str(value) in str(result)
        else:
            assert isinstance(result, dict)
            assert float(result["OUTPUT0"][0, 0]) == value * 2
    ran = sorted(v for echo in echoes for batch in echo.batches for v in batch)
    assert ran == sorted(values)
    assert all(echo.closed for echo in echoes)


async def test_a_caller_submitting_in_a_loop_lets_other_tasks_run() -> None:
    """An inline run finishes before ``submit`` awaits; the submit must still give the loop a
    turn, or a client that submits in a loop starves every other task (here: the one that
    tells it to stop)."""
    loop = asyncio.get_running_loop()
    stats = ModelStats("m", 1)
    echo = _Echo()
    pool = InstancePool("m", [echo], stats, loop, inline_bound_ns=10**12)
    scheduler = DirectScheduler(pool, stats)
    stop, warm = asyncio.Event(), asyncio.Event()
    submitted = 0

    async def client() -> None:
        nonlocal submitted
        while not stop.is_set() and submitted < 10_000:
            await scheduler.submit(_request(1.0))
            submitted += 1
            if submitted > INLINE_WARM_UP:
                warm.set()

    async def stopper() -> None:
        await warm.wait()
        stop.set()

    try:
        await asyncio.gather(client(), stopper())
    finally:
        await asyncio.to_thread(pool.close)
    assert threading.get_ident() in echo.threads  # the inline path was taken
    assert submitted < 10_000, "the submitting client never let the stopping task run"
