"""FP16 and BF16 candidates: what ONNX Runtime's CPU provider runs in FP16, and BF16 through
OpenVINO, each served by inferd's own backend and compared with its source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from opt_graph_models import conv_net, mlp, rng, save, serve

from inferd.tools.optimize.candidate import OPENVINO_PLATFORM, CandidateSkipped
from inferd.tools.optimize.cpu import CpuFeatures, detect_cpu, parse_cpuinfo
from inferd.tools.optimize.precision import build_bf16, build_fp16, fp16_kernels
from inferd.tools.optimize.verify import onnx_session, run_onnx


def _x(rows: int = 6) -> np.ndarray:
    return rng("x", rows).standard_normal((rows, 32)).astype(np.float32)


def test_the_kernel_registry_names_the_cpu_providers_fp16_operators() -> None:
    kernels = fp16_kernels()
    assert kernels is not None
    assert ("", "LayerNormalization") in kernels  # ONNX Runtime has had this one for long
    assert all(isinstance(domain, str) and op for domain, op in kernels)


def test_fp16_is_skipped_or_built_as_the_cpu_provider_runs_matmul(tmp_path: Path) -> None:
    source = save(mlp(), tmp_path / "mlp.onnx")
    kernels = fp16_kernels()
    assert kernels is not None
    if ("", "MatMul") in kernels:
        candidate = build_fp16(source, tmp_path / "out", sample={"x": _x()})
        blocked = candidate.recipe["op_block_list"]
        assert isinstance(blocked, list)
        assert "MatMul" not in blocked
    else:  # x86 today: MatMul would be cast back to FP32 at load
        with pytest.raises(CandidateSkipped, match="no FP16 kernel for MatMul"):
            build_fp16(source, tmp_path / "out", sample={"x": _x()})


def test_fp16_for_size_halves_the_weights_and_keeps_fp32_io(tmp_path: Path) -> None:
    source = save(conv_net(), tmp_path / "cnn.onnx")
    image = rng("image", 5).uniform(0, 16, (5, 1, 8, 8)).astype(np.float32)
    candidate = build_fp16(source, tmp_path / "out", sample={"image": image}, for_size=True)
    assert (candidate.name, candidate.kind) == ("fp16", "fp16")
    model = onnx.load(str(candidate.path))
    weights = {i.data_type for i in model.graph.initializer if len(i.dims) > 1}
    assert weights == {TensorProto.FLOAT16}
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert candidate.path.stat().st_size < 0.6 * source.stat().st_size
    served = serve(candidate, tmp_path, {"image": image})
    want = run_onnx(onnx_session(source), {"image": image})["scores"]
    np.testing.assert_allclose(served["scores"], want, atol=0.02 * np.abs(want).max())
    assert any("file size, not time" in note for note in candidate.notes)


def test_fp16_block_ops_stay_fp32(tmp_path: Path) -> None:
    source = save(mlp(), tmp_path / "mlp.onnx")
    candidate = build_fp16(
        source, tmp_path / "out", sample={"x": _x()}, for_size=True, block_ops=["Softmax"]
    )
    model = onnx.load(str(candidate.path))
    softmax = next(n for n in model.graph.node if n.op_type == "Softmax")
    cast_in = next(n for n in model.graph.node if softmax.input[0] in n.output)
    assert cast_in.op_type == "Cast"  # the converter feeds the blocked op FP32
    assert next(a.i for a in cast_in.attribute if a.name == "to") == TensorProto.FLOAT


def test_a_model_without_heavy_operators_has_nothing_for_fp16_to_speed_up(
    tmp_path: Path,
) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    source = save(model, tmp_path / "relu.onnx")
    with pytest.raises(CandidateSkipped, match="no MatMul, Gemm, Conv"):
        build_fp16(source, tmp_path / "out", sample={"x": np.ones((2, 4), np.float32)})


def test_bf16_is_skipped_on_a_cpu_without_bf16(tmp_path: Path) -> None:
    source = save(mlp(), tmp_path / "mlp.onnx")
    ice_lake = parse_cpuinfo("flags\t: avx2 avx512f avx512_vnni\n")
    with pytest.raises(CandidateSkipped, match="no BF16 instructions"):
        build_bf16(source, tmp_path / "out", sample={"x": _x()}, cpu=ice_lake)
    assert not (tmp_path / "out").exists()


def test_bf16_runs_through_openvino_with_the_precision_hint(tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    cpu = detect_cpu()
    if cpu.known and not cpu.bf16:
        pytest.skip(f"this CPU has no BF16: {cpu.summary()}")
    source = save(conv_net(), tmp_path / "cnn.onnx")
    image = rng("image", 8).uniform(0, 16, (8, 1, 8, 8)).astype(np.float32)
    candidate = build_bf16(source, tmp_path / "out", sample={"image": image}, cpu=cpu)
    assert candidate.platform == OPENVINO_PLATFORM
    assert dict(candidate.parameters) == {"HINT_BF16": "YES"}
    assert candidate.path.name == "model.xml"
    assert candidate.path.with_suffix(".bin").is_file()
    served = serve(candidate, tmp_path, {"image": image})
    want = run_onnx(onnx_session(source), {"image": image})["scores"]
    error = np.abs(served["scores"] - want).max()
    assert error < 0.05 * np.abs(want).max()
    assert error > 0  # bfloat16 keeps 8 bits of mantissa: not bit-identical to FP32


def test_bf16_on_unknown_features_is_built_and_kept_when_openvino_runs_bf16(
    tmp_path: Path,
) -> None:
    pytest.importorskip("openvino")
    source = save(mlp(), tmp_path / "mlp.onnx")
    unknown = CpuFeatures(known=False, reason="test")
    if detect_cpu().bf16:
        candidate = build_bf16(source, tmp_path / "out", sample={"x": _x()}, cpu=unknown)
        assert candidate.kind == "bf16"
    else:
        with pytest.raises(CandidateSkipped, match="even when asked for bf16"):
            build_bf16(source, tmp_path / "out", sample={"x": _x()}, cpu=unknown)
