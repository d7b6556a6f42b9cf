"""Models with several versions for the traffic policy tests, written in a repository."""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto, helper

from tests.helpers.models import ADD_SUB_CONFIG, finish, spin_model, write_add_sub, write_model

ALL_VERSIONS = "\nversion_policy: { all { } }\n"

PARSE_CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ -1 ] } ]
version_policy: { all { } }
"""

SPIN_CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
version_policy: { all { } }
"""


def zeros_like_text_model() -> bytes:
    """``Y = zeros(len(X))`` (INT32) for a string ``X`` of shape [-1]: never fails."""
    x = helper.make_tensor_value_info("X", TensorProto.STRING, [-1])
    y = helper.make_tensor_value_info("Y", TensorProto.INT32, [-1])
    zero = helper.make_tensor("zero", TensorProto.INT32, [1], [0])
    nodes = [
        helper.make_node("Shape", ["X"], ["shape"]),
        helper.make_node("ConstantOfShape", ["shape"], ["Y"], value=zero),
    ]
    return finish(helper.make_graph(nodes, "zeros", [x], [y]))


def parse_text_model() -> bytes:
    """``Y = int(X)``: non-numeric text fails in onnxruntime, at run time."""
    x = helper.make_tensor_value_info("X", TensorProto.STRING, [-1])
    y = helper.make_tensor_value_info("Y", TensorProto.INT32, [-1])
    node = helper.make_node("Cast", ["X"], ["Y"], to=TensorProto.INT32)
    return finish(helper.make_graph([node], "parse", [x], [y]))


def write_rollout_repo(root: Path) -> Path:
    """``addsub`` (versions 1-3: OUTPUT0 = a + b + v - 1), ``parse`` (1: zeros, never fails;
    2: parses its text, fails on words), ``spin`` (1: at once; 2: about IN x 0.5 s of work),
    every version served."""
    write_add_sub(root, "addsub", (1, 2, 3), config=ADD_SUB_CONFIG + ALL_VERSIONS)
    write_model(root, "parse", zeros_like_text_model(), PARSE_CONFIG, (1,))
    (root / "parse" / "2").mkdir()
    (root / "parse" / "2" / "model.onnx").write_bytes(parse_text_model())
    write_model(root, "spin", spin_model(1), SPIN_CONFIG, (1,))
    (root / "spin" / "2").mkdir()
    (root / "spin" / "2" / "model.onnx").write_bytes(spin_model(125))
    return root
