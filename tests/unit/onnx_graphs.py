"""Tiny ONNX graphs built with ``onnx.helper`` for config and backend tests (not a test module)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx
from onnx import TensorProto, helper

Dim = int | str | None


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def with_weights(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto],
) -> onnx.ModelProto:
    """A checked model of ``nodes`` with ``initializers`` (opset 17)."""
    return _model(nodes, inputs, outputs, initializers)


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


def add_sub(elem: int = TensorProto.INT32, shape: Sequence[Dim] = ("N", 16)) -> onnx.ModelProto:
    """Triton's ``simple``: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    shape = list(shape)
    return _model(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        [
            helper.make_tensor_value_info("INPUT0", elem, shape),
            helper.make_tensor_value_info("INPUT1", elem, shape),
        ],
        [
            helper.make_tensor_value_info("OUTPUT0", elem, shape),
            helper.make_tensor_value_info("OUTPUT1", elem, shape),
        ],
    )


def identity(elem: int, shape: Sequence[Dim] = ("N", 3)) -> onnx.ModelProto:
    """OUT = IN for any element type (strings included)."""
    return _model(
        [helper.make_node("Identity", ["IN"], ["OUT"])],
        [helper.make_tensor_value_info("IN", elem, list(shape))],
        [helper.make_tensor_value_info("OUT", elem, list(shape))],
    )


def sum_to_scalar() -> onnx.ModelProto:
    """X: FP32 [4] -> Y: FP32 scalar (a model that cannot batch, with a rank-0 output)."""
    return _model(
        [helper.make_node("ReduceSum", ["X"], ["Y"], keepdims=0)],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [])],
    )


def batched_scalar() -> onnx.ModelProto:
    """X: FP32 [N] -> Y: FP32 [N] (Y = X * 2); per batch item both are scalars."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    return _model(
        [
            helper.make_node("Constant", [], ["c"], value=two),
            helper.make_node("Mul", ["X", "c"], ["Y"]),
        ],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N"])],
    )


def flatten_2x3() -> onnx.ModelProto:
    """X: FP32 [N, 6] -> Y: FP32 [N, 2, 3]: exercises config reshape on both sides."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [-1, 2, 3])
    return _model(
        [
            helper.make_node("Constant", [], ["s"], value=shape),
            helper.make_node("Reshape", ["X", "s"], ["Y"]),
        ],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 2, 3])],
    )


def wide_hidden(features: int = 16, width: int = 4096) -> onnx.ModelProto:
    """Y = ReduceSum(X @ W, axis 1): a ``[N, width]`` float intermediate, ``N * width * 4``
    bytes of activations for a batch of N rows (weights: ``features * width`` ones)."""
    weights = helper.make_tensor(
        "W", TensorProto.FLOAT, [features, width], [1.0] * (features * width)
    )
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["H"]),
            helper.make_node("ReduceSum", ["H", "axes"], ["Y"], keepdims=1),
        ],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", features])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])],
        [weights, axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
