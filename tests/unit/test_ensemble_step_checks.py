"""An ensemble step skips its model's request check only when the ensemble has made the same
check: the step model still serves the spec it was loaded against, and every input has that
spec's dtype, batch size and fixed dims. Any other request is checked by the step model, whose
message names the problem."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import inferd.repository.calls as calls
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import InvalidArgumentError
from inferd.repository.calls import InProcessCaller
from inferd.repository.manager_types import ServingModel
from inferd.scheduling.ensemble import EnsembleScheduler
from inferd.scheduling.ensemble_graph import build_graph
from inferd.scheduling.stats import ModelStats

Arrays = dict[str, np.ndarray[Any, Any]]


def spec(text: str) -> ModelSpec:
    return spec_from_proto(parse_pbtxt(text, "test"))


def step_model(dims: str = "4", mbs: int = 8) -> ModelSpec:
    return spec(
        f'name: "double" backend: "onnxruntime" max_batch_size: {mbs} '
        f'input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {dims} ] }} ] '
        f'output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ {dims} ] }} ]'
    )


ENSEMBLE = spec(
    'name: "pipe" platform: "ensemble" max_batch_size: 8 '
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ] '
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ] '
    'ensemble_scheduling { step [ { model_name: "double" model_version: -1 '
    'input_map { key: "X" value: "IN" } output_map { key: "Y" value: "OUT" } } ] }'
)


class Recording:
    """A scheduler that doubles ``X`` and remembers the batch size it was given."""

    def __init__(self) -> None:
        self.rows: list[int] = []

    async def submit(self, request: InferRequest, rows: int = 1) -> Arrays:
        self.rows.append(rows)
        return {"Y": request.inputs["X"] * 2}


class Checks:
    """An InProcessCaller over one step model, counting the requests it checked itself."""

    def __init__(self, served: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
        self.scheduler = Recording()
        self.model = ServingModel(served, 1, self.scheduler, ModelStats("double", 1))  # type: ignore[arg-type]
        self.caller = InProcessCaller(lambda name, version: self.model)
        self.checked_by_step = 0
        original = calls.validate_request

        def counting(request: InferRequest, model_spec: ModelSpec) -> int:
            self.checked_by_step += 1
            return original(request, model_spec)

        monkeypatch.setattr(calls, "validate_request", counting)


@pytest.fixture
def step_spec() -> ModelSpec:
    return step_model()


def scheduler(checks: Checks, loaded_against: ModelSpec) -> EnsembleScheduler:
    graph = build_graph(ENSEMBLE)
    return EnsembleScheduler(
        graph, checks.caller, ModelStats("pipe", 1), step_specs=[loaded_against], batching=True
    )


async def test_a_fitting_step_request_is_not_checked_twice(
    step_spec: ModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = Checks(step_spec, monkeypatch)
    ensemble = scheduler(checks, step_spec)
    x = np.ones((3, 4), np.float32)
    out = await ensemble.submit(InferRequest("pipe", {"IN": x}), rows=3)
    np.testing.assert_array_equal(out["OUT"], x * 2)
    assert checks.checked_by_step == 0
    assert checks.scheduler.rows == [3]


@pytest.mark.parametrize(
    "given",
    [
        np.ones((3, 5), np.float32),  # wrong inner dims
        np.ones((3, 4), np.float64),  # wrong dtype
        np.ones((3, 4, 1), np.float32),  # one dimension too many
    ],
    ids=["dims", "dtype", "rank"],
)
async def test_a_step_request_the_plan_does_not_fit_is_checked_by_the_step_model(
    step_spec: ModelSpec, given: np.ndarray[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = Checks(step_spec, monkeypatch)
    ensemble = scheduler(checks, step_spec)
    with pytest.raises(InvalidArgumentError, match=r"step 0 \(model 'double'\) failed"):
        await ensemble.submit(InferRequest("pipe", {"IN": given}), rows=3)
    assert checks.checked_by_step == 1
    assert checks.scheduler.rows == []


async def test_a_reloaded_step_model_checks_every_request_itself(
    step_spec: ModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    reloaded = step_model()  # an equal config, but another load: not the spec checked at load
    checks = Checks(reloaded, monkeypatch)
    ensemble = scheduler(checks, step_spec)
    await ensemble.submit(InferRequest("pipe", {"IN": np.ones((2, 4), np.float32)}), rows=2)
    assert checks.checked_by_step == 1
    assert checks.scheduler.rows == [2]


async def test_variable_dims_are_left_to_the_step_model(monkeypatch: pytest.MonkeyPatch) -> None:
    variable = step_model(dims="-1")
    checks = Checks(variable, monkeypatch)
    ensemble = scheduler(checks, variable)
    await ensemble.submit(InferRequest("pipe", {"IN": np.ones((2, 7), np.float32)}), rows=2)
    assert checks.checked_by_step == 1


async def test_drain_waits_for_the_request_in_flight(
    step_spec: ModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = Checks(step_spec, monkeypatch)
    release = asyncio.Event()
    original = checks.scheduler.submit

    async def slow(request: InferRequest, rows: int = 1) -> Arrays:
        await release.wait()
        return await original(request, rows)

    checks.scheduler.submit = slow  # type: ignore[method-assign]
    ensemble = scheduler(checks, step_spec)
    await ensemble.drain()  # nothing in flight: returns at once
    request = asyncio.ensure_future(
        ensemble.submit(InferRequest("pipe", {"IN": np.ones((1, 4), np.float32)}), rows=1)
    )
    await asyncio.sleep(0)
    drained = asyncio.ensure_future(ensemble.drain())
    await asyncio.sleep(0)
    assert not drained.done()
    release.set()
    await request
    await asyncio.wait_for(drained, 5)
