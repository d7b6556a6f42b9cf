"""The conformance kit (``inferd.testing.conformance``) over every backend installed here."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx_graphs import add_sub, save, sum_to_scalar

from inferd.testing.conformance import ConformanceCase, conformance_tests

Array = np.ndarray[Any, Any]


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


# -- models -------------------------------------------------------------------------------------


def _add_sub_config(backend: str, filename: str = "") -> str:
    name = f'default_model_filename: "{filename}"\n' if filename else ""
    return f'backend: "{backend}"\n{name}max_batch_size: 8\n'


def _add_sub_inputs(rng: np.random.Generator, rows: int) -> dict[str, Array]:
    return {
        "INPUT0": rng.standard_normal((rows, 16)).astype(np.float32),
        "INPUT1": rng.standard_normal((rows, 16)).astype(np.float32),
    }


def _add_sub_check(inputs: dict[str, Array], outputs: Any) -> None:
    np.testing.assert_allclose(outputs["OUTPUT0"], inputs["INPUT0"] + inputs["INPUT1"], rtol=1e-6)
    np.testing.assert_allclose(outputs["OUTPUT1"], inputs["INPUT0"] - inputs["INPUT1"], rtol=1e-6)


def _fp32_add_sub() -> onnx.ModelProto:
    return add_sub(elem=TensorProto.FLOAT)


def _write_onnx(model: onnx.ModelProto, version_dir: Path) -> None:
    save(model, version_dir / "model.onnx")


def _sum_inputs(rng: np.random.Generator, rows: int) -> dict[str, Array]:
    return {"X": rng.standard_normal(4).astype(np.float32)}


def _sum_check(inputs: dict[str, Array], outputs: Any) -> None:
    np.testing.assert_allclose(outputs["Y"], [inputs["X"].sum()], rtol=1e-5)


def _ort_add_sub(version_dir: Path) -> str:
    _write_onnx(_fp32_add_sub(), version_dir)
    return _add_sub_config("onnxruntime")


def _ort_sum(version_dir: Path) -> str:
    _write_onnx(sum_to_scalar(), version_dir)
    return 'backend: "onnxruntime"\n'


def _ov_onnx_add_sub(version_dir: Path) -> str:
    _write_onnx(_fp32_add_sub(), version_dir)
    return _add_sub_config("openvino", "model.onnx")


def _ov_ir_add_sub(version_dir: Path) -> str:
    import openvino as ov

    source = version_dir / "source.onnx"
    _write_onnx(_fp32_add_sub(), version_dir)
    (version_dir / "model.onnx").rename(source)
    ov.save_model(ov.Core().read_model(str(source)), str(version_dir / "model.xml"))
    source.unlink()
    return 'backend: "openvino"\nmax_batch_size: 8\n'


def _ov_sum(version_dir: Path) -> str:
    _write_onnx(sum_to_scalar(), version_dir)
    return 'backend: "openvino"\ndefault_model_filename: "model.onnx"\n'


CASES = [
    ConformanceCase("ort_add_sub", _ort_add_sub, _add_sub_inputs, _add_sub_check),
    ConformanceCase("ort_sum_scalar", _ort_sum, _sum_inputs, _sum_check),
]

if _has("openvino"):
    CASES += [
        ConformanceCase("ov_onnx_add_sub", _ov_onnx_add_sub, _add_sub_inputs, _add_sub_check),
        ConformanceCase("ov_ir_add_sub", _ov_ir_add_sub, _add_sub_inputs, _add_sub_check),
        ConformanceCase("ov_sum_scalar", _ov_sum, _sum_inputs, _sum_check),
    ]


# -- the MLP both ONNX runtimes serve (also used by the benchmark) ------------------------------


def mlp(sizes: tuple[int, ...] = (64, 256, 256, 10), seed: int = 0) -> onnx.ModelProto:
    """X: FP32 [N, 64] -> Y: FP32 [N, 10] through Gemm+Relu layers."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    current = "X"
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        b = np.zeros(fan_out, np.float32)
        inits += [
            helper.make_tensor(f"w{i}", TensorProto.FLOAT, w.shape, w.ravel()),
            helper.make_tensor(f"b{i}", TensorProto.FLOAT, b.shape, b),
        ]
        last = i == len(sizes) - 2
        out = "Y" if last else f"h{i}"
        gemm_out = out if last else f"g{i}"
        nodes.append(helper.make_node("Gemm", [current, f"w{i}", f"b{i}"], [gemm_out]))
        if not last:
            nodes.append(helper.make_node("Relu", [gemm_out], [out]))
        current = out
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", sizes[0]])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", sizes[-1]])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _mlp_inputs(rng: np.random.Generator, rows: int) -> dict[str, Array]:
    return {"X": rng.standard_normal((rows, 64)).astype(np.float32)}


def _mlp_writer(backend: str) -> Any:
    def write(version_dir: Path) -> str:
        _write_onnx(mlp(), version_dir)
        return f'backend: "{backend}"\ndefault_model_filename: "model.onnx"\nmax_batch_size: 32\n'

    return write


CASES.append(ConformanceCase("ort_mlp", _mlp_writer("onnxruntime"), _mlp_inputs, rtol=1e-4))
if _has("openvino"):
    CASES.append(
        ConformanceCase("ov_mlp", _mlp_writer("openvino"), _mlp_inputs, rtol=1e-4, atol=1e-5)
    )


test_builtin_backends = conformance_tests(*CASES)
