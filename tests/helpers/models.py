"""Tiny ONNX models built inside the tests, written in Triton's repository layout."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

ADD_SUB_CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"""


def add_sub_model(offset: int = 0) -> bytes:
    """OUTPUT0 = INPUT0 + INPUT1 + offset, OUTPUT1 = INPUT0 - INPUT1 (INT32, [-1, 16])."""
    shape = ["batch", 16]
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("INPUT0", "INPUT1")
    ]
    outputs = [
        helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("OUTPUT0", "OUTPUT1")
    ]
    off = helper.make_tensor("offset", TensorProto.INT32, [1], [offset])
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["sum"]),
        helper.make_node("Add", ["sum", "offset"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    graph = helper.make_graph(nodes, "add_sub", inputs, outputs, initializer=[off])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def write_add_sub(
    repo: Path,
    name: str = "simple",
    versions: tuple[int, ...] = (1,),
    *,
    config: str | None = ADD_SUB_CONFIG,
    offsets: dict[int, int] | None = None,
) -> Path:
    """Write an add/sub model; version v adds ``offsets[v]`` (default v - 1) to OUTPUT0."""
    model_dir = repo / name
    model_dir.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config.replace("{name}", name))
    for v in versions:
        (model_dir / str(v)).mkdir(exist_ok=True)
        offset = (offsets or {}).get(v, v - 1)
        (model_dir / str(v) / "model.onnx").write_bytes(add_sub_model(offset))
    return model_dir
