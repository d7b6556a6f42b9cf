"""The instance pool: errors per request, and instances closed only once their batch is over."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from inferd.backends.base import Result
from inferd.core.inference import InferRequest
from inferd.errors import InternalError, InvalidArgumentError
from inferd.scheduling.instances import InstancePool, WorkItem
from inferd.scheduling.stats import ModelStats
from inferd.testing import FakeInstance


def _item(loop: asyncio.AbstractEventLoop, count: int) -> WorkItem:
    requests = [InferRequest("m", {"INPUT0": np.full((1, 2), i, np.float32)}) for i in range(count)]
    return WorkItem(requests, [loop.create_future() for _ in requests], [0] * count, count)


class _Failing:
    """An instance whose whole batch fails, with the runtime's error or an unexpected one."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.closed = False

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        raise self.error

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    "error",
    [InvalidArgumentError("bad batch"), RuntimeError("unexpected")],
    ids=["inferd error", "other exception"],
)
async def test_a_failed_batch_gives_each_request_its_own_error(error: Exception) -> None:
    loop = asyncio.get_running_loop()
    pool = InstancePool("m", [_Failing(error)], ModelStats("m", 1), loop)
    item = _item(loop, 3)
    pool.put(item)
    errors = []
    for waiter in item.waiters:
        with pytest.raises((InvalidArgumentError, InternalError)) as info:
            await waiter
        errors.append(info.value)
    await asyncio.to_thread(pool.close)
    assert len({id(e) for e in errors}) == 3
    assert len({str(e) for e in errors}) == 1
    assert {type(e) for e in errors} == {
        InvalidArgumentError if isinstance(error, InvalidArgumentError) else InternalError
    }


async def test_close_never_closes_an_instance_under_a_running_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    gate = threading.Semaphore(0)
    instance = FakeInstance(gate=gate)
    pool = InstancePool("m", [instance], ModelStats("m", 1), loop)
    item = _item(loop, 1)
    pool.put(item)
    for _ in range(2000):  # until the batch is inside execute(), held by the gate
        if instance.received:
            break
        await asyncio.sleep(0.001)
    released: list[bool] = []  # the model the instances share, released after the last one
    with caplog.at_level(logging.WARNING, logger="inferd.scheduling"):
        await asyncio.to_thread(pool.close, 0.05, lambda: released.append(instance.closed))
    assert not instance.closed
    assert released == []
    assert "still executing" in caplog.text
    gate.release()
    out = await item.waiters[0]
    np.testing.assert_array_equal(out["OUTPUT0"], np.zeros((1, 2), np.float32))
    for _ in range(2000):
        if instance.closed:
            break
        await asyncio.sleep(0.001)
    assert instance.closed
    for _ in range(2000):
        if released:
            break
        await asyncio.sleep(0.001)
    assert released == [True]


async def test_close_closes_every_idle_instance_then_runs_its_callback_once() -> None:
    instances = [FakeInstance(), FakeInstance()]
    pool = InstancePool("m", instances, ModelStats("m", 1), asyncio.get_running_loop())
    calls: list[bool] = []
    await asyncio.to_thread(pool.close, 5.0, lambda: calls.append(all(i.closed for i in instances)))
    assert calls == [True]
