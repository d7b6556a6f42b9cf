"""Tiny ONNX models built inside the tests, written in Triton's repository layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from inferd.core.datatypes import DataType

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

#: the same model as a load request's JSON ``config`` (what an upload sends with its files)
ADD_SUB_CONFIG_JSON = json.dumps(
    {
        "backend": "onnxruntime",
        "max_batch_size": 8,
        "input": [
            {"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("INPUT0", "INPUT1")
        ],
        "output": [
            {"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")
        ],
    }
)


def add_sub_model(offset: int = 0) -> bytes:
    """OUTPUT0 = INPUT0 + INPUT1 + offset, OUTPUT1 = INPUT0 - INPUT1 (INT32, [-1, 16])."""
    shape: list[str | int | None] = ["batch", 16]
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
    return finish(helper.make_graph(nodes, "add_sub", inputs, outputs, initializer=[off]))


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


# -- more builders: any graph, identity per datatype, a runtime failure, adjustable work --------


def finish(graph: onnx.GraphProto) -> bytes:
    """A checked opset-17 model (IR 8, which every supported onnxruntime loads)."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def write_model(
    repo: Path, name: str, model: bytes, config: str | None, versions: tuple[int, ...] = (1,)
) -> Path:
    """Write ``model`` as ``<repo>/<name>/<v>/model.onnx`` with ``config`` (``{name}`` filled)."""
    model_dir = repo / name
    for v in versions:
        (model_dir / str(v)).mkdir(parents=True, exist_ok=True)
        (model_dir / str(v) / "model.onnx").write_bytes(model)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config.replace("{name}", name))
    return model_dir


def onnx_type(datatype: DataType) -> int:
    """The ONNX element type of a v2 datatype (BYTES is an ONNX string)."""
    if datatype.is_bytes:
        return int(TensorProto.STRING)
    return int(helper.np_dtype_to_tensor_dtype(datatype.dtype))


def identity_model(pairs: list[tuple[str, str, int]], shape: list[str | int | None]) -> bytes:
    """One ``Identity`` per ``(input, output, onnx type)``, every tensor of ``shape``."""
    nodes = [helper.make_node("Identity", [i], [o]) for i, o, _ in pairs]
    inputs = [helper.make_tensor_value_info(i, t, shape) for i, _, t in pairs]
    outputs = [helper.make_tensor_value_info(o, t, shape) for _, o, t in pairs]
    return finish(helper.make_graph(nodes, "identity", inputs, outputs))


def cast_to_int_model() -> bytes:
    """``Y = Cast(X, INT32)`` over a string ``X`` of shape [-1]: non-numeric text makes
    onnxruntime fail at run time (RUNTIME_EXCEPTION), after every check has passed."""
    x = helper.make_tensor_value_info("X", TensorProto.STRING, [-1])
    y = helper.make_tensor_value_info("Y", TensorProto.INT32, [-1])
    node = helper.make_node("Cast", ["X"], ["Y"], to=TensorProto.INT32)
    return finish(helper.make_graph([node], "cast_to_int", [x], [y]))


def spin_model(steps_per_unit: int = 250, side: int = 32, *, batched: bool = False) -> bytes:
    """``OUT = IN`` (INT32, shape [1]) after ``IN * steps_per_unit`` small matrix products.

    The run time grows with the (largest) value sent (about a millisecond per unit on a laptop
    core); ``batched`` gives the tensors a leading batch dimension, ``[-1, 1]``,
    which lets tests keep a request busy inside onnxruntime without any sleep.
    """
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["v_in", "w"], ["product"]),
            helper.make_node("Tanh", ["product"], ["v_out"]),  # stays finite
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "step",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [side, side]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [side, side]),
        ],
    )
    initializers = [
        numpy_helper.from_array(np.full((side, side), 0.01, np.float32), "w"),
        numpy_helper.from_array(np.ones((side, side), np.float32), "v0"),
        numpy_helper.from_array(np.array([steps_per_unit], np.int64), "per_unit"),
        numpy_helper.from_array(np.array(True), "keep_going"),
        numpy_helper.from_array(np.array([0], np.int32), "zero"),
    ]
    nodes = [
        helper.make_node("Cast", ["IN"], ["in64"], to=TensorProto.INT64),
        helper.make_node("Mul", ["in64", "per_unit"], ["steps1"]),
        helper.make_node("ReduceMax", ["steps1"], ["steps"], keepdims=0),
        helper.make_node("Loop", ["steps", "keep_going", "v0"], ["v_final"], body=body),
        # tie the loop to the output (x 0) so that no optimiser can drop it
        helper.make_node("ReduceMax", ["v_final"], ["peak"], keepdims=0),
        helper.make_node("Cast", ["peak"], ["peak_int"], to=TensorProto.INT32),
        helper.make_node("Mul", ["peak_int", "zero"], ["nothing"]),
        helper.make_node("Add", ["IN", "nothing"], ["OUT"]),
    ]
    shape: list[int | str] = ["batch", 1] if batched else [1]
    graph = helper.make_graph(
        nodes,
        "spin",
        [helper.make_tensor_value_info("IN", TensorProto.INT32, shape)],
        [helper.make_tensor_value_info("OUT", TensorProto.INT32, shape)],
        initializer=initializers,
    )
    return finish(graph)
