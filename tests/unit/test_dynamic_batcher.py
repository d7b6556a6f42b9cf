"""The dynamic batcher and instance pool, with scripted instances and a fake clock."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from inferd.core.datatypes import from_name
from inferd.core.inference import InferRequest
from inferd.core.model_spec import (
    DynamicBatchingSpec,
    InstanceGroupSpec,
    ModelSpec,
    QueuePolicySpec,
    TensorSpec,
)
from inferd.errors import DeadlineExceededError, InvalidArgumentError, OverloadedError
from inferd.scheduling.dynamic import DynamicBatcher
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.stats import ModelStats
from inferd.testing import FakeClock, FakeInstance

US = 1000


def spec(db: DynamicBatchingSpec, max_batch: int = 8) -> ModelSpec:
    fp32 = from_name("FP32")
    return ModelSpec(
        name="m",
        platform="",
        backend="fake",
        max_batch_size=max_batch,
        inputs=(TensorSpec("INPUT0", fp32, (-1,)),),
        outputs=(TensorSpec("OUTPUT0", fp32, (-1,)),),
        instance_groups=(InstanceGroupSpec("m", "KIND_CPU", 1),),
        parameters={},
        default_model_filename="",
        dynamic_batching=db,
    )


def req(value: float, width: int = 2, **params: Any) -> InferRequest:
    return InferRequest("m", {"INPUT0": np.full((1, width), value, np.float32)}, parameters=params)


@dataclass
class Rig:
    batcher: DynamicBatcher
    instances: list[FakeInstance]
    gate: threading.Semaphore
    clock: FakeClock
    stats: ModelStats

    async def until(self, condition: Callable[[], bool]) -> None:
        """Yield to the loop until the condition holds (bounded: instances are real threads)."""
        for _ in range(2000):
            if condition():
                return
            await asyncio.sleep(0.001)
        raise AssertionError("condition never held")

    def sizes(self) -> list[int]:
        return sorted(len(b) for inst in self.instances for b in inst.batches)


@pytest.fixture
async def make_rig() -> AsyncIterator[Callable[..., Rig]]:
    rigs: list[Rig] = []

    def build(db: DynamicBatchingSpec, instances: int = 1, **kw: Any) -> Rig:
        gate = threading.Semaphore(0)
        insts = [FakeInstance(gate=gate, **kw) for _ in range(instances)]
        clock = FakeClock()
        stats = ModelStats("m", 1)
        pool = InstancePool("m", insts, stats, asyncio.get_running_loop(), clock)
        rig = Rig(DynamicBatcher(spec(db), pool, stats, clock=clock), insts, gate, clock, stats)
        rigs.append(rig)
        return rig

    yield build
    for rig in rigs:
        rig.gate.release(1000)
        for inst in rig.instances:
            if inst.gate is not None:
                inst.gate.release(1000)
        rig.batcher.shutdown()
        await asyncio.to_thread(rig.batcher._pool.close)


async def test_requests_pile_up_while_the_instance_is_busy(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(DynamicBatchingSpec())
    first = asyncio.create_task(rig.batcher.submit(req(0)))
    await rig.until(lambda: rig.batcher._pool.free == 0)
    rest = [asyncio.create_task(rig.batcher.submit(req(i))) for i in range(1, 6)]
    await rig.until(lambda: len(rig.batcher._queues) == 5)
    rig.gate.release(2)
    results = await asyncio.gather(first, *rest)
    assert rig.sizes() == [1, 5]
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out["OUTPUT0"], np.full((1, 2), i, np.float32))
    snap = rig.stats.snapshot()
    assert snap.execution_count == 2
    assert snap.inference_count == 6
    assert set(snap.batch_stats) == {1, 5}
    assert snap.success.count == snap.queue.count == 6


async def test_waits_for_the_queue_delay_then_sends(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(DynamicBatchingSpec(preferred_batch_sizes=(4,), max_queue_delay_us=500))
    rig.gate.release(10)
    a = asyncio.create_task(rig.batcher.submit(req(1)))
    b = asyncio.create_task(rig.batcher.submit(req(2)))
    await rig.until(lambda: len(rig.batcher._queues) == 2 and bool(rig.clock.pending_timers))
    assert rig.clock.pending_timers == [rig.clock.monotonic_ns() + 500 * US]
    rig.clock.advance(499 * US)
    await asyncio.sleep(0.01)
    assert not a.done()  # nothing is sent before the delay
    rig.clock.advance(1 * US)
    await asyncio.gather(a, b)
    assert rig.sizes() == [2]
    assert rig.stats.close_reasons["delay_expired"] == 1


async def test_preferred_size_is_sent_without_waiting(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(DynamicBatchingSpec(preferred_batch_sizes=(3,), max_queue_delay_us=10**9))
    rig.gate.release(10)
    outs = await asyncio.gather(*(rig.batcher.submit(req(i)) for i in range(3)))
    assert len(outs) == 3
    assert rig.sizes() == [3]


async def test_shapes_that_differ_run_in_separate_batches(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(DynamicBatchingSpec())
    blocker = asyncio.create_task(rig.batcher.submit(req(0)))
    await rig.until(lambda: rig.batcher._pool.free == 0)
    tasks = [asyncio.create_task(rig.batcher.submit(req(i, width=2 + i % 2))) for i in range(4)]
    await rig.until(lambda: len(rig.batcher._queues) == 4)
    rig.gate.release(10)
    await asyncio.gather(blocker, *tasks)
    # the queue alternates widths 2,3,2,3: each shape change closes a batch
    assert rig.sizes() == [1, 1, 1, 1, 1]
    assert rig.stats.close_reasons["shape_mismatch"] >= 3


async def test_full_queue_refuses_at_once(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(DynamicBatchingSpec(default_queue_policy=QueuePolicySpec(max_queue_size=2)))
    blocker = asyncio.create_task(rig.batcher.submit(req(0)))
    await rig.until(lambda: rig.batcher._pool.free == 0)
    waiting = [asyncio.create_task(rig.batcher.submit(req(i))) for i in (1, 2)]
    await rig.until(lambda: len(rig.batcher._queues) == 2)
    with pytest.raises(OverloadedError, match="Exceeds maximum queue size"):
        await rig.batcher.submit(req(3))
    rig.gate.release(10)
    await asyncio.gather(blocker, *waiting)
    snap = rig.stats.snapshot()
    assert snap.rejections == {"queue_full": 1}
    assert snap.failures["REJECTED"] == 1


async def test_queue_timeout_rejects_before_execution(make_rig: Callable[..., Rig]) -> None:
    policy = QueuePolicySpec(default_timeout_us=100, allow_timeout_override=True)
    rig = make_rig(DynamicBatchingSpec(default_queue_policy=policy))
    blocker = asyncio.create_task(rig.batcher.submit(req(0)))
    await rig.until(lambda: rig.batcher._pool.free == 0)
    late = asyncio.create_task(rig.batcher.submit(req(1)))
    patient = asyncio.create_task(rig.batcher.submit(req(2, timeout=10_000)))
    await rig.until(lambda: len(rig.batcher._queues) == 2)
    rig.clock.advance(200 * US)
    with pytest.raises(DeadlineExceededError, match="timeout"):
        await late
    rig.gate.release(10)
    await asyncio.gather(blocker, patient)
    executed = [r for inst in rig.instances for b in inst.batches for r in b]
    assert all(r.inputs["INPUT0"][0, 0] != 1 for r in executed)  # the expired one never ran
    assert rig.stats.snapshot().rejections == {"queue_timeout": 1}


async def test_cancelled_requests_never_run(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(DynamicBatchingSpec())
    blocker = asyncio.create_task(rig.batcher.submit(req(0)))
    await rig.until(lambda: rig.batcher._pool.free == 0)
    gone = asyncio.create_task(rig.batcher.submit(req(7)))
    kept = asyncio.create_task(rig.batcher.submit(req(8)))
    await rig.until(lambda: len(rig.batcher._queues) == 2)
    gone.cancel()
    await asyncio.sleep(0)
    rig.gate.release(10)
    await asyncio.gather(blocker, kept)
    executed = [r.inputs["INPUT0"][0, 0] for inst in rig.instances for b in inst.batches for r in b]
    assert 7 not in executed
    assert 8 in executed


async def test_priorities_are_served_first(make_rig: Callable[..., Rig]) -> None:
    db = DynamicBatchingSpec(priority_levels=2, default_priority_level=2)
    rig = make_rig(db)
    rig.batcher._policy = type(rig.batcher._policy)(1, (), 0)  # one request per batch
    blocker = asyncio.create_task(rig.batcher.submit(req(0)))
    await rig.until(lambda: rig.batcher._pool.free == 0)
    low = asyncio.create_task(rig.batcher.submit(req(1)))
    high = asyncio.create_task(rig.batcher.submit(req(2, priority=1)))
    await rig.until(lambda: len(rig.batcher._queues) == 2)
    rig.gate.release(10)
    await asyncio.gather(blocker, low, high)
    order = [b[0].inputs["INPUT0"][0, 0] for b in rig.instances[0].batches]
    assert order == [0, 2, 1]
    with pytest.raises(InvalidArgumentError, match="priority"):
        await rig.batcher.submit(req(3, priority=5))


async def test_one_bad_request_fails_alone(make_rig: Callable[..., Rig]) -> None:
    def compute(inputs: dict[str, Any]) -> dict[str, Any]:
        if inputs["INPUT0"][0, 0] == 13:
            raise InvalidArgumentError("unlucky input")
        return {"OUTPUT0": inputs["INPUT0"]}

    rig = make_rig(DynamicBatchingSpec(), compute=compute)
    blocker = asyncio.create_task(rig.batcher.submit(req(0)))
    await rig.until(lambda: rig.batcher._pool.free == 0)
    tasks = [asyncio.create_task(rig.batcher.submit(req(v))) for v in (12, 13, 14)]
    await rig.until(lambda: len(rig.batcher._queues) == 3)
    rig.gate.release(10)
    results = await asyncio.gather(blocker, *tasks, return_exceptions=True)
    assert isinstance(results[2], InvalidArgumentError)
    assert not isinstance(results[1], BaseException)
    assert not isinstance(results[3], BaseException)
    assert rig.sizes() == [1, 3]  # they shared a batch; only one failed
    assert rig.stats.snapshot().failures["BACKEND"] == 1


async def test_two_instances_share_the_work(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(DynamicBatchingSpec(), instances=2)
    a = asyncio.create_task(rig.batcher.submit(req(0)))
    await rig.until(lambda: rig.batcher._pool.free == 1)
    b = asyncio.create_task(rig.batcher.submit(req(1)))
    await rig.until(lambda: rig.batcher._pool.free == 0)  # the second went to the idle instance
    rig.gate.release(2)
    await asyncio.gather(a, b)
    assert [len(i.batches) for i in rig.instances] == [1, 1]


async def test_preserve_ordering_answers_in_arrival_order(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(DynamicBatchingSpec(preserve_ordering=True), instances=2)
    for inst in rig.instances:
        inst.gate = threading.Semaphore(0)  # release each instance on its own
    rig.batcher._policy = type(rig.batcher._policy)(1, (), 0)  # one request per batch
    finished: list[int] = []

    async def one(value: int) -> None:
        await rig.batcher.submit(req(value))
        finished.append(value)

    first = asyncio.create_task(one(1))
    await rig.until(lambda: rig.batcher._pool.free == 1)
    second = asyncio.create_task(one(2))
    await rig.until(lambda: rig.batcher._pool.free == 0)
    await rig.until(lambda: all(inst.received for inst in rig.instances))
    by_value = {int(i.received[0][0].inputs["INPUT0"][0, 0]): i for i in rig.instances}
    later, earlier = by_value[2], by_value[1]
    assert later.gate is not None
    assert earlier.gate is not None
    later.gate.release(1)  # request 2 finishes computing first...
    await rig.until(lambda: len(later.batches) == 1)
    await asyncio.sleep(0.01)
    assert finished == []  # ...but is not answered before request 1
    earlier.gate.release(1)
    await asyncio.gather(first, second)
    assert finished == [1, 2]
