"""Triton's batch-dimension rule between an ensemble and its steps (``ReshapeTensorDims``): which
reads cross between a batching and a non-batching side, and what each such read receives."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.model_spec import ModelSpec
from inferd.scheduling.ensemble_graph import build_graph
from inferd.scheduling.ensemble_shapes import Reshape, plan_reshapes, reshape


def spec(text: str) -> ModelSpec:
    return spec_from_proto(parse_pbtxt(text, "test"))


def identity(name: str, mbs: int, dims: str = "-1") -> ModelSpec:
    return spec(
        f'name: "{name}" backend: "onnxruntime" max_batch_size: {mbs} '
        f'input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {dims} ] }} ] '
        f'output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ {dims} ] }} ]'
    )


def chain(mbs: int, first: str, second: str) -> ModelSpec:
    return spec(
        f'name: "pipe" platform: "ensemble" max_batch_size: {mbs} '
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ] '
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ] '
        f'ensemble_scheduling {{ step [ {{ model_name: "{first}" model_version: -1 '
        'input_map { key: "X" value: "IN" } output_map { key: "Y" value: "MID" } }, '
        f'{{ model_name: "{second}" model_version: -1 '
        'input_map { key: "X" value: "MID" } output_map { key: "Y" value: "OUT" } } ] }'
    )


def test_only_reads_across_kinds_are_planned() -> None:
    batching, plain = identity("b", 8), identity("p", 0)
    same = chain(8, "b", "b")
    assert plan_reshapes(build_graph(same), same, [batching, batching]).empty
    # non-batching ensemble -> batching step -> non-batching step -> out
    mixed = chain(0, "b", "p")
    plan = plan_reshapes(build_graph(mixed), mixed, [batching, plain])
    assert plan.steps == ((Reshape("X", (-1,), add=True),), (Reshape("X", (-1,), add=False),))
    assert plan.outputs == ()
    # batching ensemble -> non-batching step -> batching step -> out (batched: no reshape)
    other = chain(8, "p", "b")
    plan = plan_reshapes(build_graph(other), other, [plain, batching])
    assert plan.steps == ((Reshape("X", (-1,), add=False),), (Reshape("X", (-1,), add=True),))
    assert plan.outputs == ()
    # a non-batching ensemble whose output comes from a batching step
    last = chain(0, "p", "b")
    plan = plan_reshapes(build_graph(last), last, [plain, batching])
    assert plan.outputs == (Reshape("OUT", (-1,), add=False),)


@pytest.mark.parametrize(
    ("how", "shape", "expected"),
    [
        (Reshape("X", (-1,), add=True), (4,), (1, 4)),  # matches: gains a batch of 1
        (Reshape("X", (4,), add=True), (1, 4), (1, 4)),  # already batched: passed on
        (Reshape("X", (-1,), add=False), (1, 4), (4,)),  # batch of 1: stripped
        (Reshape("X", (-1, -1), add=False), (1, 4), (1, 4)),  # matches whole: passed on
        (Reshape("X", (-1,), add=False), (2, 4), (2, 4)),  # batch of 2: never stripped
        (Reshape("X", (3,), add=True), (4,), (4,)),  # no match: passed on as it is
    ],
)
def test_reshape_follows_triton(
    how: Reshape, shape: tuple[int, ...], expected: tuple[int, ...]
) -> None:
    array = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    result = reshape(array, how)
    assert result.shape == expected
    assert np.shares_memory(result, array)  # a view, never a copy
