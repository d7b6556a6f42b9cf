"""The ensemble scheduler and the sequence batcher are OPEN, CLOSING or CLOSED like the other
schedulers: a request submitted after shutdown fails at once as unavailable, a request already
running gets its answer (or a clean error), a second shutdown changes nothing, and requests
racing a close each get one answer or one error."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferd.backends.base import Result
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import UnavailableError
from inferd.repository.calls import InProcessCaller
from inferd.repository.manager_types import ServingModel
from inferd.repository.streaming import stream_model
from inferd.scheduling.direct import DirectScheduler
from inferd.scheduling.ensemble import EnsembleScheduler
from inferd.scheduling.ensemble_graph import build_graph
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.lifecycle import RunState
from inferd.scheduling.pinned import PinnedPools
from inferd.scheduling.sequence import SequenceBatcher
from inferd.scheduling.stats import ModelStats

# long enough for any machine, short enough that a hang fails the test rather than the run
ANSWER_S = 10.0


def _spec(text: str) -> ModelSpec:
    return spec_from_proto(parse_pbtxt(text, "test"))


SEQUENCE = _spec(
    'name: "seq" backend: "fake" max_batch_size: 4 '
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    "sequence_batching { max_sequence_idle_microseconds: 600000000 }"
)
DECOUPLED_SEQUENCE = _spec(
    'name: "seq" backend: "fake" max_batch_size: 4 '
    "model_transaction_policy { decoupled: true } "
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    "sequence_batching { }"
)
STEP = _spec(
    'name: "double" backend: "fake" max_batch_size: 8 '
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]'
)
ENSEMBLE = _spec(
    'name: "pipe" platform: "ensemble" max_batch_size: 8 '
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ] '
    'ensemble_scheduling { step [ { model_name: "double" model_version: -1 '
    'input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }'
)


@dataclass
class _Double:
    """Doubles INPUT0 and records every value it ran (from any thread); with ``gate`` set,
    each batch signals ``entered`` and waits for the test to release it."""

    inline_safe: bool = False
    gate: threading.Semaphore | None = None
    entered: threading.Event = field(default_factory=threading.Event)
    ran: list[float] = field(default_factory=list)
    closed: bool = False

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        self.entered.set()
        if self.gate is not None:
            self.gate.acquire()
        self.ran.extend(float(r.inputs["INPUT0"][0, 0]) for r in requests)
        return [{"OUTPUT0": r.inputs["INPUT0"] * 2} for r in requests]

    def close(self) -> None:
        self.closed = True


def _sequence_request(value: float, key: int, *, start: bool, end: bool) -> InferRequest:
    return InferRequest(
        "seq",
        {"INPUT0": np.full((1, 2), value, np.float32)},
        parameters={"sequence_id": key, "sequence_start": start, "sequence_end": end},
    )


def _ensemble_request(value: float) -> InferRequest:
    return InferRequest("pipe", {"IN": np.full((1, 2), value, np.float32)})


class _Ensemble:
    """An ensemble over one step model served by a direct scheduler on a real pool."""

    def __init__(self, instances: list[_Double], loop: asyncio.AbstractEventLoop) -> None:
        step_stats = ModelStats("double", 1)
        self.pool = InstancePool("double-1", instances, step_stats, loop)
        self.step = DirectScheduler(self.pool, step_stats)
        served = ServingModel(STEP, 1, self.step, step_stats)
        self.stats = ModelStats("pipe", 1)
        self.scheduler = EnsembleScheduler(
            build_graph(ENSEMBLE), InProcessCaller(lambda name, version: served), self.stats
        )

    def close(self) -> None:  # on the loop: the step model's retirement after the ensemble's
        self.scheduler.shutdown()
        self.step.shutdown()


# -- submit after shutdown --------------------------------------------------------------------


async def test_a_sequence_request_after_shutdown_fails_at_once(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    stats = ModelStats("seq", 2)
    pools = PinnedPools("seq-2", [_Double()], stats, loop)
    batcher = SequenceBatcher(SEQUENCE, pools, stats, tmp_path)
    try:
        answer = await asyncio.wait_for(
            batcher.submit(_sequence_request(1.0, 7, start=True, end=False)), ANSWER_S
        )
        assert float(answer["OUTPUT0"][0, 0]) == 2.0
        assert batcher.state is RunState.OPEN
        batcher.shutdown()
        batcher.shutdown()  # a second shutdown changes nothing
        assert batcher.state is RunState.CLOSED  # nothing was in flight
        with pytest.raises(UnavailableError, match="model 'seq' version 2 is unloading"):
            await asyncio.wait_for(
                batcher.submit(_sequence_request(2.0, 7, start=False, end=True)), ANSWER_S
            )
        assert stats.rejections["unloading"] == 1
    finally:
        await asyncio.to_thread(pools.close)


async def test_an_ensemble_request_after_shutdown_fails_at_once_and_runs_no_step() -> None:
    echo = _Double()
    ensemble = _Ensemble([echo], asyncio.get_running_loop())
    scheduler = ensemble.scheduler
    try:
        answer = await asyncio.wait_for(scheduler.submit(_ensemble_request(1.0)), ANSWER_S)
        assert float(answer["OUT"][0, 0]) == 2.0
        scheduler.shutdown()
        scheduler.shutdown()  # a second shutdown changes nothing
        assert scheduler.state is RunState.CLOSED
        with pytest.raises(UnavailableError, match="model 'pipe' version 1 is unloading"):
            await asyncio.wait_for(scheduler.submit(_ensemble_request(2.0)), ANSWER_S)
        assert ensemble.stats.rejections["unloading"] == 1
        assert echo.ran == [1.0]  # the refused request reached no step
    finally:
        ensemble.step.shutdown()
        await asyncio.to_thread(ensemble.pool.close)


# -- shutdown with work in flight -------------------------------------------------------------


async def test_a_sequence_request_running_at_shutdown_gets_its_answer(tmp_path: Path) -> None:
    """The running request is answered (its sequence is forgotten); the one waiting for its
    turn behind it fails as unavailable; the batcher closes once both have their outcome."""
    loop = asyncio.get_running_loop()
    gate = threading.Semaphore(0)
    instance = _Double(gate=gate)
    stats = ModelStats("seq", 1)
    pools = PinnedPools("seq-1", [instance], stats, loop)
    batcher = SequenceBatcher(SEQUENCE, pools, stats, tmp_path)
    try:
        running = asyncio.ensure_future(
            batcher.submit(_sequence_request(1.0, 5, start=True, end=False))
        )
        waiting = asyncio.ensure_future(
            batcher.submit(_sequence_request(2.0, 5, start=False, end=True))
        )
        assert await asyncio.to_thread(instance.entered.wait, ANSWER_S)
        batcher.shutdown()
        assert batcher.state is RunState.CLOSING
        with pytest.raises(UnavailableError, match="model 'seq' version 1 is unloading"):
            await asyncio.wait_for(waiting, ANSWER_S)
        assert batcher.state is RunState.CLOSING  # the running request holds it open
        gate.release()
        answer = await asyncio.wait_for(running, ANSWER_S)
        assert float(answer["OUTPUT0"][0, 0]) == 2.0
        assert batcher.state is RunState.CLOSED
        assert batcher.in_flight == 0
        assert instance.ran == [1.0]
    finally:
        gate.release()
        await asyncio.to_thread(pools.close)


async def test_an_ensemble_request_running_at_shutdown_finishes_its_steps() -> None:
    gate = threading.Semaphore(0)
    step = _Double(gate=gate)
    ensemble = _Ensemble([step], asyncio.get_running_loop())
    scheduler = ensemble.scheduler
    try:
        running = asyncio.ensure_future(scheduler.submit(_ensemble_request(3.0)))
        assert await asyncio.to_thread(step.entered.wait, ANSWER_S)
        scheduler.shutdown()
        assert scheduler.state is RunState.CLOSING
        with pytest.raises(UnavailableError, match="model 'pipe' version 1 is unloading"):
            await asyncio.wait_for(scheduler.submit(_ensemble_request(4.0)), ANSWER_S)
        gate.release()
        answer = await asyncio.wait_for(running, ANSWER_S)
        assert float(answer["OUT"][0, 0]) == 6.0
        assert scheduler.state is RunState.CLOSED
        assert scheduler.in_flight == 0
        await asyncio.wait_for(scheduler.drain(), ANSWER_S)
    finally:
        gate.release()
        ensemble.step.shutdown()
        await asyncio.to_thread(ensemble.pool.close)


async def test_a_decoupled_sequence_stream_started_as_its_model_unloads_ends_with_an_error(
    tmp_path: Path,
) -> None:
    """The stream hands its request to the batcher from a task of its own; an unload that runs
    before that task does ends the stream with the unavailable error, not a hang."""
    loop = asyncio.get_running_loop()
    instance = _Double()
    stats = ModelStats("seq", 1)
    pools = PinnedPools("seq-1", [instance], stats, loop)
    batcher = SequenceBatcher(DECOUPLED_SEQUENCE, pools, stats, tmp_path)
    model = ServingModel(DECOUPLED_SEQUENCE, 1, batcher, stats)
    stream = stream_model(model, _sequence_request(1.0, 9, start=True, end=True), 1)
    first = asyncio.ensure_future(anext(stream))

    def unload() -> None:  # the manager's retirement, squeezed between two loop turns
        batcher.shutdown()
        pools.close(ANSWER_S)

    loop.call_soon(unload)  # runs after the stream's first step, before its submit task
    event = await asyncio.wait_for(first, ANSWER_S)
    assert event.final
    assert isinstance(event.error, UnavailableError)
    assert "model 'seq' version 1 is unloading" in str(event.error)
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    assert instance.ran == []
    assert batcher.state is RunState.CLOSED


async def test_an_ensemble_stream_started_as_the_ensemble_unloads_ends_with_an_error() -> None:
    """As above for a (decoupled) ensemble: the request unloaded in the gap runs no step."""
    loop = asyncio.get_running_loop()
    step = _Double()
    ensemble = _Ensemble([step], loop)
    spec = dataclasses.replace(ENSEMBLE, decoupled=True)
    model = ServingModel(spec, 1, ensemble.scheduler, ensemble.stats)
    stream = stream_model(model, _ensemble_request(1.0), 1)
    first = asyncio.ensure_future(anext(stream))
    loop.call_soon(ensemble.scheduler.shutdown)  # after the stream's first step
    try:
        event = await asyncio.wait_for(first, ANSWER_S)
        assert event.final
        assert isinstance(event.error, UnavailableError)
        assert "model 'pipe' version 1 is unloading" in str(event.error)
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
        assert step.ran == []
        assert ensemble.scheduler.state is RunState.CLOSED
    finally:
        ensemble.step.shutdown()
        await asyncio.to_thread(ensemble.pool.close)


# -- many threads racing a close --------------------------------------------------------------


async def _race(
    clients: int,
    sequences: int,
    length: int,
    close_after: int,
    *,
    ensemble: bool,
    instances: int,
    tmp_path: Path,
) -> tuple[list[tuple[float, object]], object, list[_Double]]:
    """``clients`` threads each submit ``sequences`` sequences of ``length`` requests (or as
    many ensemble requests) while another thread, once ``close_after`` submits are sent, shuts
    the scheduler down and closes its pools: every submit's outcome, with its value."""
    loop = asyncio.get_running_loop()
    doubles = [_Double() for _ in range(instances)]
    close_pools: object
    if ensemble:
        pipeline = _Ensemble(doubles, loop)
        scheduler: EnsembleScheduler | SequenceBatcher = pipeline.scheduler
        shutdown = pipeline.close
        close_pools = pipeline.pool.close
    else:
        stats = ModelStats("seq", 1)
        pools = PinnedPools("seq-1", doubles, stats, loop)
        scheduler = SequenceBatcher(SEQUENCE, pools, stats, tmp_path)
        shutdown = scheduler.shutdown
        close_pools = pools.close
    start = threading.Barrier(clients + 1)
    sent: list[tuple[float, asyncio.Future[object]]] = []
    lock = threading.Lock()
    reached = threading.Event()
    if close_after == 0:
        reached.set()

    def request(index: int, s: int, i: int) -> InferRequest:
        value = float(1 + index * 10_000 + s * 100 + i)  # never 0: padding rows are zeros
        if ensemble:
            return _ensemble_request(value)
        key = 1 + index * 1000 + s
        return _sequence_request(value, key, start=i == 0, end=i == length - 1)

    def client(index: int) -> None:
        start.wait()
        for s in range(sequences):
            for i in range(length):
                r = request(index, s, i)
                future = asyncio.run_coroutine_threadsafe(scheduler.submit(r), loop)
                value = float(next(iter(r.inputs.values()))[0, 0])
                with lock:
                    sent.append((value, asyncio.wrap_future(future, loop=loop)))
                    if len(sent) >= close_after:
                        reached.set()

    def closer() -> None:
        start.wait()
        reached.wait()
        loop.call_soon_threadsafe(shutdown)
        close_pools(ANSWER_S)  # type: ignore[operator]

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
    return [(v, o) for (v, _), o in zip(sent, outcomes, strict=True)], scheduler, doubles


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ensemble=st.booleans(),
    instances=st.integers(1, 3),
    clients=st.integers(1, 5),
    sequences=st.integers(1, 4),
    length=st.integers(1, 5),
    close_at=st.floats(0.0, 1.0),
)
def test_every_request_racing_a_close_gets_one_answer_or_one_error(
    tmp_path: Path,
    ensemble: bool,
    instances: int,
    clients: int,
    sequences: int,
    length: int,
    close_at: float,
) -> None:
    total = clients * sequences * length
    outcomes, scheduler, doubles = asyncio.run(
        _race(
            clients,
            sequences,
            length,
            int(close_at * total),
            ensemble=ensemble,
            instances=instances,
            tmp_path=tmp_path,
        )
    )
    assert len(outcomes) == total
    answered = []
    for value, outcome in outcomes:
        if isinstance(outcome, UnavailableError):
            assert "is unloading" in str(outcome), outcome
        else:
            assert isinstance(outcome, dict), outcome
            name = "OUT" if ensemble else "OUTPUT0"
            assert float(outcome[name][0, 0]) == value * 2
            answered.append(value)
    ran = [v for d in doubles for v in d.ran if v != 0.0]  # not the padding rows
    assert sorted(ran) == sorted(answered)  # each answer ran once; no refused request ran
    assert isinstance(scheduler, EnsembleScheduler | SequenceBatcher)
    assert scheduler.state is RunState.CLOSED
    assert scheduler.in_flight == 0
    assert all(d.closed for d in doubles)
