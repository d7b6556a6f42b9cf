"""Closing an instance pool or a scheduler is a state: work submitted after close fails at once
as unavailable, work accepted before is finished or failed, and nothing is left waiting."""

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
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.datatypes import from_name
from inferd.core.inference import InferRequest
from inferd.core.model_spec import DynamicBatchingSpec, InstanceGroupSpec, ModelSpec, TensorSpec
from inferd.errors import InternalError, UnavailableError
from inferd.repository.manager_types import ServingModel
from inferd.repository.streaming import stream_model
from inferd.scheduling.direct import DirectScheduler
from inferd.scheduling.dynamic import DynamicBatcher
from inferd.scheduling.instances import InstancePool, WorkItem
from inferd.scheduling.lifecycle import RunState, check_transition
from inferd.scheduling.pinned import PinnedPools
from inferd.scheduling.stats import ModelStats
from inferd.testing import FakeInstance

# long enough for any machine, short enough that a hang fails the test rather than the run
ANSWER_S = 10.0

DECOUPLED = """
name: "talker"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 2 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 2 ] } ]
"""


@dataclass
class _Echo:
    """Doubles INPUT0 and records every value it ran (from any thread)."""

    inline_safe: bool = True
    ran: list[float] = field(default_factory=list)
    closed: bool = False

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        self.ran.extend(float(r.inputs["INPUT0"][0, 0]) for r in requests)
        return [{"OUTPUT0": r.inputs["INPUT0"] * 2} for r in requests]

    def close(self) -> None:
        self.closed = True


def _request(value: float) -> InferRequest:
    return InferRequest("m", {"INPUT0": np.full((1, 2), value, np.float32)})


def _batching_spec() -> ModelSpec:
    fp32 = from_name("FP32")
    return ModelSpec(
        name="m",
        platform="",
        backend="fake",
        max_batch_size=8,
        inputs=(TensorSpec("INPUT0", fp32, (-1,)),),
        outputs=(TensorSpec("OUTPUT0", fp32, (-1,)),),
        instance_groups=(InstanceGroupSpec("m", "KIND_CPU", 1),),
        parameters={},
        default_model_filename="",
        dynamic_batching=DynamicBatchingSpec(max_queue_delay_us=100),
    )


def test_the_states_only_move_forward() -> None:
    check_transition(RunState.OPEN, RunState.CLOSING)
    check_transition(RunState.CLOSING, RunState.CLOSED)
    for old, new in [
        (RunState.CLOSING, RunState.OPEN),
        (RunState.CLOSED, RunState.OPEN),
        (RunState.CLOSED, RunState.CLOSING),
        (RunState.OPEN, RunState.OPEN),
    ]:
        with pytest.raises(InternalError, match=f"{old.value} -> {new.value}"):
            check_transition(old, new)


async def test_a_request_after_the_pool_closed_fails_at_once() -> None:
    loop = asyncio.get_running_loop()
    stats = ModelStats("m", 3)
    pool = InstancePool("m-3", [_Echo()], stats, loop)
    scheduler = DirectScheduler(pool, stats)
    await asyncio.to_thread(pool.close)
    with pytest.raises(UnavailableError, match="model 'm' version 3 is unloading"):
        await asyncio.wait_for(scheduler.submit(_request(1.0)), ANSWER_S)
    assert stats.failures["REJECTED"] == 1
    assert pool.state is RunState.CLOSED


@pytest.mark.parametrize("kind", ["direct", "dynamic"])
async def test_a_request_after_shutdown_fails_at_once(kind: str) -> None:
    loop = asyncio.get_running_loop()
    stats = ModelStats("m", 1)
    pool = InstancePool("m-1", [_Echo()], stats, loop)
    scheduler: DirectScheduler | DynamicBatcher
    if kind == "direct":
        scheduler = DirectScheduler(pool, stats)
    else:
        scheduler = DynamicBatcher(_batching_spec(), pool, stats)
    try:
        assert await scheduler.submit(_request(2.0)) is not None
        scheduler.shutdown()
        scheduler.shutdown()  # a second shutdown changes nothing
        with pytest.raises(UnavailableError, match="model 'm' version 1 is unloading"):
            await asyncio.wait_for(scheduler.submit(_request(1.0)), ANSWER_S)
        assert stats.rejections["unloading"] == 1
        assert scheduler.state is RunState.CLOSED  # nothing was in flight
    finally:
        await asyncio.to_thread(pool.close)


async def test_a_scheduler_closing_with_work_in_flight_closes_when_it_is_answered() -> None:
    loop = asyncio.get_running_loop()
    gate = threading.Semaphore(0)
    stats = ModelStats("m", 1)
    pool = InstancePool("m-1", [FakeInstance(gate=gate)], stats, loop)
    scheduler = DirectScheduler(pool, stats)
    submits = [asyncio.ensure_future(scheduler.submit(_request(float(v)))) for v in range(3)]
    await asyncio.sleep(0)  # every submit has reached the pool: one runs, two wait
    scheduler.shutdown()
    assert scheduler.state is RunState.CLOSING
    closing = asyncio.ensure_future(asyncio.to_thread(pool.close, ANSWER_S))
    for _ in submits:
        gate.release()
    results = await asyncio.wait_for(asyncio.gather(*submits), ANSWER_S)
    assert [float(r["OUTPUT0"][0, 0]) for r in results] == [0.0, 1.0, 2.0]  # drained, in order
    assert scheduler.state is RunState.CLOSED
    await closing
    assert pool.state is RunState.CLOSED


async def test_a_batch_put_on_a_closed_pool_fails_each_request_but_not_its_padding() -> None:
    loop = asyncio.get_running_loop()
    stats = ModelStats("m", 1)
    pool = InstancePool("m-1", [_Echo()], stats, loop)
    await asyncio.to_thread(pool.close)
    requests = [_request(float(v)) for v in range(3)]
    item = WorkItem(requests, [loop.create_future() for _ in requests], [0] * 3, 3, frozenset({1}))
    pool.put(item)
    first, padding, last = item.waiters
    assert not padding.done()
    errors = [first.exception(), last.exception()]
    assert all(isinstance(e, UnavailableError) for e in errors)
    assert errors[0] is not errors[1]
    padding.cancel()


async def test_a_batch_pinned_to_an_instance_of_closed_pools_fails_at_once() -> None:
    """The sequence batcher's pools: one single-instance pool per instance, closed together."""
    loop = asyncio.get_running_loop()
    pools = PinnedPools("m-1", [_Echo(), _Echo()], ModelStats("m", 1), loop)
    await asyncio.to_thread(pools.close)
    item = WorkItem([_request(1.0)], [loop.create_future()], [0], 1)
    pools.put(1, item)
    with pytest.raises(UnavailableError, match="model 'm' version 1 is unloading"):
        await asyncio.wait_for(item.waiters[0], ANSWER_S)


async def test_a_decoupled_stream_started_as_its_model_unloads_ends_with_an_error() -> None:
    """The stream hands its request to the scheduler from a task of its own; an unload that
    runs before that task does ends the stream with the unavailable error."""
    loop = asyncio.get_running_loop()
    stats = ModelStats("talker", 1)
    pool = InstancePool("talker-1", [_Echo()], stats, loop)
    scheduler = DirectScheduler(pool, stats)
    model = ServingModel(spec_from_proto(parse_pbtxt(DECOUPLED, "test")), 1, scheduler, stats)
    stream = stream_model(model, _request(1.0), 1)
    first = asyncio.ensure_future(anext(stream))

    def unload() -> None:  # the manager's retirement, squeezed between two loop turns
        scheduler.shutdown()
        pool.close(ANSWER_S)

    loop.call_soon(unload)  # runs after the stream's first step, before its submit task
    event = await asyncio.wait_for(first, ANSWER_S)
    assert event.final
    assert isinstance(event.error, UnavailableError)
    assert "model 'talker' version 1 is unloading" in str(event.error)
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_a_stream_of_a_model_already_unloading_ends_with_an_error() -> None:
    loop = asyncio.get_running_loop()
    stats = ModelStats("talker", 1)
    pool = InstancePool("talker-1", [_Echo()], stats, loop)
    scheduler = DirectScheduler(pool, stats)
    model = ServingModel(spec_from_proto(parse_pbtxt(DECOUPLED, "test")), 1, scheduler, stats)
    scheduler.shutdown()
    try:
        events = [e async for e in stream_model(model, _request(1.0), 1)]
    finally:
        await asyncio.to_thread(pool.close)
    assert len(events) == 1
    assert events[0].final
    assert isinstance(events[0].error, UnavailableError)


async def _race(
    instances: list[_Echo],
    clients: int,
    per_client: int,
    *,
    close_after: int,
    batching: bool,
    bound_ns: int,
) -> tuple[list[tuple[float, object]], DirectScheduler | DynamicBatcher, InstancePool]:
    """``clients`` threads submit while another thread, once ``close_after`` submits are sent,
    shuts the scheduler down and closes the pool: every submit's outcome, with its value."""
    loop = asyncio.get_running_loop()
    stats = ModelStats("m", 1)
    pool = InstancePool("m-1", instances, stats, loop, inline_bound_ns=bound_ns)
    scheduler: DirectScheduler | DynamicBatcher
    if batching:
        scheduler = DynamicBatcher(_batching_spec(), pool, stats)
    else:
        scheduler = DirectScheduler(pool, stats)
    start = threading.Barrier(clients + 1)
    sent: list[tuple[float, asyncio.Future[object]]] = []
    lock = threading.Lock()
    reached = threading.Event()
    if close_after == 0:
        reached.set()

    def client(index: int) -> None:
        start.wait()
        for i in range(per_client):
            value = float(index * 1000 + i)
            future = asyncio.run_coroutine_threadsafe(scheduler.submit(_request(value)), loop)
            with lock:
                sent.append((value, asyncio.wrap_future(future, loop=loop)))
                if len(sent) >= close_after:
                    reached.set()

    def closer() -> None:
        start.wait()
        reached.wait()
        loop.call_soon_threadsafe(scheduler.shutdown)
        pool.close(ANSWER_S)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    await asyncio.to_thread(closer)
    for thread in threads:
        await asyncio.to_thread(thread.join)
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(f for _, f in sent), return_exceptions=True), ANSWER_S
    )
    await asyncio.sleep(0)  # the last submit's own bookkeeping
    return [(v, o) for (v, _), o in zip(sent, outcomes, strict=True)], scheduler, pool


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    instances=st.integers(1, 3),
    inline=st.booleans(),
    clients=st.integers(1, 6),
    per_client=st.integers(1, 40),
    batching=st.booleans(),
    close_at=st.floats(0.0, 1.0),
)
def test_every_request_racing_a_close_gets_one_answer_or_one_error(
    instances: int, inline: bool, clients: int, per_client: int, batching: bool, close_at: float
) -> None:
    echoes = [_Echo(inline_safe=inline) for _ in range(instances)]
    outcomes, scheduler, pool = asyncio.run(
        _race(
            echoes,
            clients,
            per_client,
            close_after=int(close_at * clients * per_client),
            batching=batching,
            bound_ns=10**12 if inline else 0,
        )
    )
    assert len(outcomes) == clients * per_client
    answered = []
    for value, outcome in outcomes:
        if isinstance(outcome, UnavailableError):
            assert "model 'm' version 1 is unloading" in str(outcome)
        else:
            assert isinstance(outcome, dict), outcome
            assert float(outcome["OUTPUT0"][0, 0]) == value * 2
            answered.append(value)
    ran = [v for echo in echoes for v in echo.ran]
    assert sorted(ran) == sorted(answered)  # each answer ran once; no refused request ran
    assert pool.state is RunState.CLOSED
    assert scheduler.state is RunState.CLOSED
    assert scheduler.in_flight == 0
    assert all(echo.closed for echo in echoes)
