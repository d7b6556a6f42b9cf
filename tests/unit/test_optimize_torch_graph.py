"""ONNX graphs of dense-network operators as torch modules: the same numbers as ONNX Runtime, the
layers as real torch layers, weights written back in their own layout, and the rest refused."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")

from inferd.errors import UnsupportedError  # noqa: E402
from inferd.tools.optimize.torch_graph import to_torch  # noqa: E402

RNG = np.random.default_rng(7)


def _init(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name)


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], x_shape: list[object],
           y_shape: list[object], opset: int = 17) -> onnx.ModelProto:  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def cnn_graph() -> onnx.ModelProto:
    """Conv, BatchNorm, pooling, a residual Add, Concat, Reshape-to-flatten, Gemm (transB),
    MatMul + Add (folded into a Linear), Clip and a final Softmax."""
    nodes = [
        helper.make_node("Div", ["x", "scale"], ["x1"]),
        helper.make_node("Conv", ["x1", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "be", "mu", "var"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["res"]),
        helper.make_node("MaxPool", ["res"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("AveragePool", ["res"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Concat", ["p1", "p2"], ["cat"], axis=1),
        helper.make_node("Reshape", ["cat", "flat"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["h"], transB=1),
        helper.make_node("Clip", ["h", "lo", "hi"], ["hc"]),
        helper.make_node("MatMul", ["hc", "w4"], ["m"]),
        helper.make_node("Add", ["m", "b4"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    inits = [
        numpy_helper.from_array(np.array(16.0, np.float32), "scale"),
        _init("w1", 8, 1, 3, 3),
        _init("b1", 8),
        numpy_helper.from_array(RNG.uniform(0.5, 1.5, 8).astype(np.float32), "g"),
        _init("be", 8),
        _init("mu", 8),
        numpy_helper.from_array(RNG.uniform(0.5, 1.5, 8).astype(np.float32), "var"),
        _init("w2", 8, 8, 3, 3),
        _ints("flat", [-1, 16 * 4 * 4]),
        _init("w3", 12, 16 * 4 * 4),
        _init("b3", 12),
        numpy_helper.from_array(np.array(-2.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(2.0, np.float32), "hi"),
        _init("w4", 12, 10),
        _init("b4", 10),
    ]
    return _model(nodes, inits, ["N", 1, 8, 8], ["N", 10])


def _run_both(model: onnx.ModelProto, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    module = to_torch(model)
    with torch.no_grad():
        got = module(torch.from_numpy(x)).numpy()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return got, session.run(None, {"x": x})[0]


def test_a_cnn_graph_computes_what_onnxruntime_computes() -> None:
    x = RNG.uniform(0, 16, (5, 1, 8, 8)).astype(np.float32)
    got, want = _run_both(cnn_graph(), x)
    assert got.shape == (5, 10)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_weights_become_torch_layers_and_a_bias_add_is_folded() -> None:
    module = to_torch(cnn_graph())
    kinds = sorted(type(layer).__name__ for layer in module.layers.values())
    assert kinds == ["BatchNorm2d", "Conv2d", "Conv2d", "Linear", "Linear"]
    linears = [layer for layer in module.layers.values() if isinstance(layer, torch.nn.Linear)]
    assert [(lin.in_features, lin.out_features) for lin in linears] == [(256, 12), (12, 10)]
    assert all(lin.bias is not None for lin in linears)  # MatMul + Add became one Linear
    assert not any(step.op == "Add" and step.outputs == ["logits"] for step in module.steps)
    # the Reshape to [-1, 256] is a flatten, so a pruned conv before it still fits
    assert any(step.op == "Flatten" for step in module.steps)


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_an_mlp_with_every_activation(opset: int) -> None:
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], alpha=0.5, beta=2.0),
        helper.make_node("LeakyRelu", ["h1"], ["a1"], alpha=0.1),
        helper.make_node("Gemm", ["a1", "w2"], ["h2"], transB=1),
        helper.make_node("Sigmoid", ["h2"], ["a2"]),
        helper.make_node("Mul", ["a2", "h2"], ["a3"]),
        helper.make_node("Tanh", ["a3"], ["a4"]),
        helper.make_node("Gemm", ["a4", "w3", "b3"], ["h3"]),
        helper.make_node("LogSoftmax", ["h3"], ["y"], axis=1),
    ]
    inits = [_init("w1", 64, 32), _init("b1", 32), _init("w2", 16, 32), _init("w3", 16, 10)]
    inits.append(_init("b3", 10))
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    got, want = _run_both(_model(nodes, inits, ["N", 64], ["N", 10], opset), x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_written_back_weights_reach_the_onnx_graph_in_their_layout() -> None:
    model = cnn_graph()
    module = to_torch(model)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(torch.randn_like(param) * 0.1)
        for layer in module.layers.values():
            if isinstance(layer, torch.nn.BatchNorm2d):
                layer.running_mean.add_(0.5)
    module.write_back(model)
    x = RNG.uniform(0, 16, (3, 1, 8, 8)).astype(np.float32)
    with torch.no_grad():
        changed = module(torch.from_numpy(x)).numpy()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], changed, rtol=1e-4, atol=1e-5)


def test_other_operators_are_refused_by_name() -> None:
    nodes = [
        helper.make_node("Gemm", ["x", "w"], ["h"]),
        helper.make_node("TopK", ["h", "k"], ["y", "i"]),
    ]
    model = _model(nodes, [_init("w", 4, 4), _ints("k", [2])], ["N", 4], ["N", 2])
    with pytest.raises(UnsupportedError, match="operators not converted to torch: TopK"):
        to_torch(model)


def test_non_float_inputs_are_refused() -> None:
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    with pytest.raises(UnsupportedError, match="Cast"):
        to_torch(helper.make_model(graph))
    graph.node[0].op_type = "Identity"
    del graph.node[0].attribute[:]
    with pytest.raises(UnsupportedError, match="'x' is not float32"):
        to_torch(helper.make_model(graph))
