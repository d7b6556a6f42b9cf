"""A stream's :class:`ResponseBudget`: a decoupled model that sends faster than its stream is
read waits for room instead of piling responses up in the server, and a consumer that leaves
sets it free."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import numpy as np
import pytest

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.streaming import ResponseBudget, StreamedResponse
from inferd.repository.manager_types import ServingModel
from inferd.repository.streaming import stream_model
from inferd.scheduling.stats import ModelStats

CONFIG = """
name: "burst"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""


class BurstScheduler:
    """Answers each request from a thread of its own: N responses as fast as it can, then the
    final flag (as a decoupled Python model's reader thread would)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.sent = 0  # sends that returned

    async def submit(self, request: InferRequest, rows: int = 1) -> dict[str, Any]:
        sink = request.sink
        assert sink is not None
        sink.adopt()
        count = int(request.inputs["N"][0])

        def run() -> None:
            for i in range(count):
                sink.send(StreamedResponse({"OUT": np.array([i], np.int32)}))
                self.sent += 1
            sink.send(StreamedResponse(None, None, True))

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)
        return {}

    async def drain(self) -> None:
        return None

    def shutdown(self) -> None:
        return None


def serving(scheduler: BurstScheduler) -> ServingModel:
    spec = spec_from_proto(parse_pbtxt(CONFIG, "test"))
    return ServingModel(spec, 1, scheduler, ModelStats("burst", 1))


def request(count: int) -> InferRequest:
    return InferRequest("burst", {"N": np.array([count], np.int32)})


async def until(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def test_a_model_sending_ahead_of_its_reader_waits_for_room() -> None:
    scheduler = BurstScheduler()
    model = serving(scheduler)
    budget = ResponseBudget(4)
    stream = stream_model(model, request(50), 1, budget)
    async with contextlib.aclosing(stream):
        first = await stream.__anext__()
        assert first.outputs is not None
        assert first.outputs["OUT"].tolist() == [0]
        # nothing more is read: the model fills the budget and its next send waits
        await until(lambda: budget.held == 4)
        await asyncio.sleep(0.2)
        assert scheduler.sent == 5  # the first one, read, and four held
        assert budget.held == 4
        rest = [item async for item in stream]
    values = [int(item.outputs["OUT"][0]) for item in rest if item.outputs is not None]
    assert values == list(range(1, 50))
    assert rest[-1].final
    assert budget.held == 0
    stats = model.stats.snapshot().response_stats
    assert [stats[i].success.count for i in range(50)] == [1] * 50
    assert stats[50].empty_response.count == 1


async def test_a_consumer_that_leaves_frees_a_waiting_model() -> None:
    scheduler = BurstScheduler()
    budget = ResponseBudget(3)
    stream = stream_model(serving(scheduler), request(1000), 1, budget)
    await stream.__anext__()
    await until(lambda: budget.held == 3)
    await stream.aclose()  # the client went away
    thread = scheduler.threads[0]
    await asyncio.to_thread(thread.join, 10)
    assert not thread.is_alive()  # its later sends were dropped, never queued
    await asyncio.sleep(0)  # the dropped ones' callbacks run on the loop
    assert budget.held == 0


def test_the_owner_thread_never_waits_and_close_frees_everyone() -> None:
    budget = ResponseBudget(1)
    assert budget.acquire(lambda: False)
    assert budget.acquire(lambda: False)  # over the limit, on the thread that built it
    assert budget.held == 2
    outcome: list[bool] = []
    waiter = threading.Thread(target=lambda: outcome.append(budget.acquire(lambda: False)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # no room: it waits
    budget.close()
    waiter.join(5)
    assert outcome == [False]
    assert not budget.acquire(lambda: False)


def test_release_lets_one_waiter_in_and_gone_lets_it_give_up() -> None:
    budget = ResponseBudget(1)
    assert budget.acquire(lambda: False)
    outcome: list[bool] = []
    leave = threading.Event()
    waiter = threading.Thread(target=lambda: outcome.append(budget.acquire(leave.is_set)))
    waiter.start()
    budget.release()
    waiter.join(5)
    assert outcome == [True]
    assert budget.held == 1
    second = threading.Thread(target=lambda: outcome.append(budget.acquire(leave.is_set)))
    second.start()
    second.join(0.2)
    assert second.is_alive()
    leave.set()
    budget.wake()
    second.join(5)
    assert outcome == [True, False]
    assert budget.held == 1


def test_a_budget_needs_room() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ResponseBudget(0)


def test_a_final_response_never_waits_for_room() -> None:
    budget = ResponseBudget(1)
    outcome: list[bool] = []

    def send_two() -> None:
        outcome.append(budget.acquire(lambda: False))
        outcome.append(budget.acquire(lambda: False, wait=False))  # over the limit, at once

    sender = threading.Thread(target=send_two)
    sender.start()
    sender.join(5)
    assert outcome == [True, True]
    assert budget.held == 2
