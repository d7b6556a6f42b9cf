"""An unloaded model is freed at once, by reference counting: nothing of it is left in a
reference cycle for the garbage collector's next full pass (which can come much later, while
the memory it holds, a runtime's session or a tokenizer, still counts against a budget), and
nothing that outlives the version (its statistics, kept across loads) holds on to it.

Each case loads an example model in process, serves one request, unloads it with the collector
off, and then checks that its scheduler (which holds the instances and through them the
model) is gone and asks the collector what it would have freed."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest
from inferd.core.model_spec import TensorSpec
from inferd.engine import Engine
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import RepositoryManager
from inferd.repository.records import ControlMode

SEQUENCE = {"sequence_id": 7, "sequence_start": True, "sequence_end": True}

CASES = [
    pytest.param("digits_cnn", {}, id="onnx-dynamic-batcher"),
    pytest.param("fraud_xgboost", {}, id="fil-dynamic-batcher"),
    pytest.param("simple_sequence", SEQUENCE, id="onnx-sequence-batcher"),
    pytest.param("simple_identity", {}, id="python-direct"),
    pytest.param("digits_preprocess", {}, id="python-dynamic-batcher"),
]


def _zeros(tensor: TensorSpec, batched: bool) -> np.ndarray[Any, Any]:
    shape = ([1] if batched else []) + [1 if d < 0 else d for d in tensor.dims]
    if tensor.datatype.is_bytes:
        return np.full(shape, b"1", dtype=object)
    return np.zeros(shape, tensor.datatype.dtype)


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()  # what earlier tests left
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _cycle_garbage() -> list[str]:
    """The inferd objects only the collector would free now."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return sorted({name for name in found if name.startswith("inferd.")})


@pytest.mark.parametrize(("model", "parameters"), CASES)
async def test_an_unloaded_model_leaves_nothing_for_the_collector(
    example_repo: Path, model: str, parameters: dict[str, Any], collector_off: None
) -> None:
    manager = RepositoryManager(
        [example_repo], default_registry(), mode=ControlMode.EXPLICIT, options=LoadOptions()
    )
    try:
        await manager.startup()
        engine = Engine(manager, server_version="test")
        for _ in range(2):  # the second round: nothing left from first imports
            gc.collect()
            await manager.load(model)
            serving = manager.get(model, None)
            spec, scheduler = serving.spec, weakref.ref(serving.scheduler)
            del serving
            inputs = {t.name: _zeros(t, spec.max_batch_size > 0) for t in spec.inputs}
            request = InferRequest(model_name=model, inputs=inputs, parameters=dict(parameters))
            response = await engine.infer(request)
            assert response.outputs
            del spec, inputs, request, response
            await manager.unload(model)
            await asyncio.sleep(0.2)  # the instances' threads end and close their sessions
            assert scheduler() is None, f"{model}: the unloaded scheduler is still referenced"
            assert _cycle_garbage() == []
    finally:
        await manager.close()
