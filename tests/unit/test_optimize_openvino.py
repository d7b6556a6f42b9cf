"""OpenVINO candidates: the ONNX model as IR served in FP32, and NNCF's INT8 quantization of
it, each served by inferd's openvino backend and compared with its source."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from opt_graph_models import Rows, attention_block, conv_net, mlp, rng, save, serve

ov = pytest.importorskip("openvino")

from inferd.tools.optimize.candidate import (  # noqa: E402
    OPENVINO_PLATFORM,
    Candidate,
    CandidateSkipped,
)
from inferd.tools.optimize.cpu import detect_cpu  # noqa: E402
from inferd.tools.optimize.openvino import build_nncf_int8, build_openvino  # noqa: E402
from inferd.tools.optimize.precision import bf16_variant  # noqa: E402
from inferd.tools.optimize.verify import onnx_session, run_onnx  # noqa: E402


def _images(rows: int) -> np.ndarray:
    return rng("images", rows).uniform(0, 16, (rows, 1, 8, 8)).astype(np.float32)


def _ops(path: Path) -> set[str]:
    return {op.get_type_name() for op in ov.Core().read_model(str(path)).get_ops()}


def test_the_ir_is_served_in_fp32_and_answers_like_onnx(tmp_path: Path) -> None:
    source = save(conv_net(), tmp_path / "cnn.onnx")
    image = _images(6)
    candidate = build_openvino(source, tmp_path / "out", sample={"image": image})
    assert (candidate.name, candidate.kind, candidate.platform) == (
        "openvino",
        "openvino",
        OPENVINO_PLATFORM,
    )
    assert candidate.path == tmp_path / "out" / "openvino" / "model.xml"
    assert candidate.path.with_suffix(".bin").is_file()
    assert dict(candidate.parameters) == {"HINT_BF16": "NO"}
    served = serve(candidate, tmp_path, {"image": image})
    want = run_onnx(onnx_session(source), {"image": image})["scores"]
    # FP32 even where OpenVINO's default precision is bfloat16 (which would miss by ~1e-2)
    np.testing.assert_allclose(served["scores"], want, rtol=1e-4, atol=1e-4)


def test_nncf_int8_quantizes_a_conv_net(tmp_path: Path) -> None:
    pytest.importorskip("nncf")
    source = save(conv_net(), tmp_path / "cnn.onnx")
    calibration = Rows({"image": _images(64)})
    image = _images(8)
    candidate = build_nncf_int8(
        source, tmp_path / "out", sample={"image": image}, calibration=calibration
    )
    assert (candidate.name, candidate.kind) == ("nncf-int8", "nncf-int8")
    assert candidate.recipe["calibration_rows"] == 64
    assert candidate.recipe["model_type"] == "default"
    assert "FakeQuantize" in _ops(candidate.path)
    served = serve(candidate, tmp_path, {"image": image})
    want = run_onnx(onnx_session(source), {"image": image})["scores"]
    error = np.abs(served["scores"] - want).max()
    assert 0 < error < 0.2 * np.abs(want).max()


def test_the_int8_model_with_its_float_layers_in_bf16(tmp_path: Path) -> None:
    pytest.importorskip("nncf")
    cpu = detect_cpu()
    if cpu.known and not cpu.bf16:
        pytest.skip(f"this CPU has no BF16: {cpu.summary()}")
    source = save(conv_net(), tmp_path / "cnn.onnx")
    image = _images(8)
    int8 = build_nncf_int8(
        source, tmp_path / "out", sample={"image": image}, calibration=Rows({"image": _images(32)})
    )
    variant = bf16_variant(int8, source, sample={"image": image}, cpu=cpu)
    assert (variant.name, variant.kind, variant.parent) == (
        "nncf-int8-bf16",
        "nncf-int8",
        int8.name,
    )
    assert variant.path == int8.path
    assert dict(variant.parameters) == {"HINT_BF16": "YES"}
    assert dict(int8.parameters) == {"HINT_BF16": "NO"}
    served = serve(variant, tmp_path, {"image": image})
    want = run_onnx(onnx_session(source), {"image": image})["scores"]
    assert np.abs(served["scores"] - want).max() < 0.2 * np.abs(want).max()


def test_bf16_variants_are_for_openvino_models_only(tmp_path: Path) -> None:
    source = save(mlp(), tmp_path / "mlp.onnx")
    onnx_candidate = Candidate(name="graph-all", kind="graph", path=source)
    with pytest.raises(CandidateSkipped, match="not an OpenVINO model"):
        bf16_variant(onnx_candidate, source, sample={"x": np.ones((1, 32))})


def test_nncf_reads_at_most_the_subset_size(tmp_path: Path) -> None:
    pytest.importorskip("nncf")
    source = save(conv_net(), tmp_path / "cnn.onnx")
    images = _images(50)
    candidate = build_nncf_int8(
        source,
        tmp_path / "out",
        sample={"image": images[:4]},
        calibration=Rows({"image": images}),
        subset_size=20,
    )
    assert candidate.recipe["calibration_rows"] == 20


def test_nncf_treats_an_encoder_as_a_transformer(tmp_path: Path) -> None:
    pytest.importorskip("nncf")
    source = save(attention_block(heads=2, head_size=8, seq=6), tmp_path / "attention.onnx")
    rows = rng("attention rows").standard_normal((40, 6, 16)).astype(np.float32)
    sample = {"x": rows[:8]}
    candidate = build_nncf_int8(
        source, tmp_path / "out", sample=sample, calibration=Rows({"x": rows[8:]})
    )
    assert candidate.recipe["model_type"] == "transformer"
    served = serve(candidate, tmp_path, sample)
    want = run_onnx(onnx_session(source), sample)["y"]
    got = served["y"]
    cosine = np.sum(got * want, -1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    # INT8 on a tiny random block: most positions agree closely, a few less so, by an amount
    # that depends on the CPU's kernels; a broken model would not be near either bound
    assert cosine.mean() > 0.97, cosine
    assert cosine.min() > 0.5, cosine


def test_nncf_needs_calibration_rows(tmp_path: Path) -> None:
    pytest.importorskip("nncf")
    source = save(mlp(), tmp_path / "mlp.onnx")
    empty = Rows({"x": np.zeros((0, 32), np.float32)})
    with pytest.raises(CandidateSkipped, match="needs calibration rows"):
        build_nncf_int8(source, tmp_path / "out", sample={"x": np.ones((1, 32))}, calibration=empty)


def test_a_model_openvino_cannot_read_is_skipped(tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx model")
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    with pytest.raises(CandidateSkipped, match="OpenVINO could not convert"):
        build_openvino(broken, tmp_path / "out", sample={"x": np.ones((1, 32))})
    # OpenVINO's converter sets the root logger to ERROR: the process's logging is as it was
    assert (root.level, root.handlers) == (level, handlers)
