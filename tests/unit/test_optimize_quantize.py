"""INT8 candidates made with ONNX Runtime's quantizer: the pre-processed copy, dynamic and static
(min-max, entropy, percentile; per tensor and per channel), calibration data that does not match
the model's inputs, external data, and the calibration reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader

from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.candidate import CandidateSkipped
from inferd.tools.optimize.data import Dataset
from inferd.tools.optimize.quantize import (
    METHODS,
    CalibrationReader,
    PreparedModel,
    StaticSettings,
    int8_types,
    prepare_model,
    quantize_dynamic_int8,
    quantize_static_int8,
)

Array = np.ndarray[Any, Any]


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> Flatten -> Gemm -> Relu -> MatMul on 8x8 one-channel images (no names)."""
    rng = np.random.default_rng(seed)
    weights = {
        "W": rng.normal(0, 0.3, (8, 1, 3, 3)),
        "B": rng.normal(0, 0.1, 8),
        "W2": rng.normal(0, 0.1, (8 * 6 * 6, 16)),
        "B2": rng.normal(0, 0.1, 16),
        "W3": rng.normal(0, 0.3, (16, 10)),
    }
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "W2", "B2"], ["g"]),
        helper.make_node("Relu", ["g"], ["gr"]),
        helper.make_node("MatMul", ["gr", "W3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(w.astype(np.float32), n) for n, w in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def images(rows: int, seed: int) -> Array:
    return np.random.default_rng(seed).normal(0, 1, (rows, 1, 8, 8)).astype(np.float32)


def run(path: Path, x: Array) -> Array:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out: Array = session.run(None, {"x": x})[0]
    return out


def relative_error(path: Path, reference: Path, x: Array) -> float:
    want = run(reference, x)
    return float(np.linalg.norm(run(path, x) - want) / np.linalg.norm(want))


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("source")
    path = folder / "model.onnx"
    onnx.save(small_cnn(), path)
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One work folder for the module, so candidates share their calibrated ranges."""
    return tmp_path_factory.mktemp("work")


@pytest.fixture(scope="module")
def prepared(source: Path, work: Path) -> PreparedModel:
    return prepare_model(source, work)


EVAL = images(64, seed=2)
CALIBRATION = Dataset({"x": images(64, seed=1)}, None, "calibration")


def test_prepare_model_copies_into_the_work_dir(source: Path, prepared: PreparedModel) -> None:
    assert prepared.preprocessed
    assert prepared.source == source
    assert prepared.path.parent.name == "prepared"
    assert not prepared.external_data
    assert prepared.path.parent != source.parent
    names = [node.name for node in onnx.load(prepared.path).graph.node]
    assert all(names)
    assert len(set(names)) == len(names)
    assert any("named" in note for note in prepared.notes)
    assert relative_error(prepared.path, source, EVAL) < 1e-5


@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamic_int8_answers_close_to_the_float_model(
    source: Path, prepared: PreparedModel, tmp_path: Path, per_channel: bool
) -> None:
    candidate = quantize_dynamic_int8(prepared, tmp_path, per_channel=per_channel, parent="base")
    assert candidate.kind == "int8-dynamic"
    assert candidate.name == "int8-dynamic" + ("-pc" if per_channel else "")
    assert candidate.path == tmp_path / candidate.name / "model.onnx"
    assert candidate.parent == "base"
    assert candidate.recipe["per_channel"] is per_channel
    ops = {node.op_type for node in onnx.load(candidate.path).graph.node}
    assert "MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops
    assert "Conv" in ops  # convolutions stay in float unless asked for
    assert any("Conv nodes stay in float" in note for note in candidate.notes)
    assert relative_error(candidate.path, source, EVAL) < 0.1
    with_conv = quantize_dynamic_int8(prepared, tmp_path, op_types=["Conv", "MatMul"])
    assert "ConvInteger" in {node.op_type for node in onnx.load(with_conv.path).graph.node}


# entropy calibration clips the tails of these Gaussian activations on purpose (it trades the
# rare large values for resolution), which costs more on this model than on trained ones
BOUNDS = {"minmax": 0.1, "percentile": 0.1, "entropy": 0.25}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("per_channel", [False, True])
def test_static_int8_answers_close_to_the_float_model(
    source: Path, prepared: PreparedModel, work: Path, method: str, per_channel: bool
) -> None:
    settings = StaticSettings(method=method, per_channel=per_channel)
    candidate = quantize_static_int8(prepared, CALIBRATION, work, settings)
    assert candidate.kind == "int8-static"
    assert candidate.name == f"int8-static-{method}" + ("-pc" if per_channel else "")
    assert candidate.recipe["calibration"] == method
    assert candidate.recipe["format"] == "QDQ"
    assert candidate.recipe["calibration_rows"] == 64
    model = onnx.load(candidate.path)
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in model.graph.node}
    assert relative_error(candidate.path, source, EVAL) < BOUNDS[method]
    top1 = run(candidate.path, EVAL).argmax(axis=1) == run(source, EVAL).argmax(axis=1)
    assert top1.mean() >= 0.9


def test_the_calibration_methods_choose_different_ranges(
    prepared: PreparedModel, work: Path
) -> None:
    scales = {}
    for method in METHODS:
        candidate = quantize_static_int8(prepared, CALIBRATION, work, StaticSettings(method=method))
        graph = onnx.load(candidate.path).graph
        scales[method] = {
            t.name: float(numpy_helper.to_array(t))
            for t in graph.initializer
            if t.name.endswith("_scale") and not t.dims
        }
    activations = [name for name in scales["minmax"] if not name.startswith(("W", "B"))]
    assert activations
    clipped = [a for a in activations if scales["entropy"][a] < 0.95 * scales["minmax"][a]]
    assert clipped  # entropy really searches thresholds below the extremes
    for name in activations:
        assert scales["percentile"][name] <= scales["minmax"][name] * 1.0001


def test_the_calibrators_progress_stays_off_stdout(
    prepared: PreparedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = StaticSettings(method="percentile")
    quantize_static_int8(prepared, CALIBRATION, tmp_path, settings)
    assert capsys.readouterr().out == ""


def test_activation_types_follow_the_cpu(prepared: PreparedModel, tmp_path: Path) -> None:
    for vnni, machine, activation, reduce_range in [
        (True, "x86_64", "uint8", False),
        (False, "AMD64", "uint8", True),
        (False, "aarch64", "int8", False),
    ]:
        types = int8_types(vnni=vnni, machine=machine)
        assert (types.activation, types.reduce_range) == (activation, reduce_range)
    signed = quantize_static_int8(
        prepared, CALIBRATION, tmp_path, StaticSettings(activation="int8"), name="signed"
    )
    assert signed.recipe["activations"] == "int8"
    zero_points = [
        t for t in onnx.load(signed.path).graph.initializer if t.name.endswith("x_zero_point")
    ]
    assert [t.data_type for t in zero_points] == [TensorProto.INT8]


@pytest.mark.parametrize("scale", [100.0, 0.0])
def test_calibration_on_other_data_gives_a_worse_candidate(
    source: Path, prepared: PreparedModel, tmp_path: Path, scale: float
) -> None:
    good = quantize_static_int8(prepared, CALIBRATION, tmp_path, name="good")
    wrong_data = Dataset({"x": CALIBRATION.inputs["x"] * scale}, None, f"scaled by {scale}")
    wrong = quantize_static_int8(prepared, wrong_data, tmp_path, name="wrong")
    good_error = relative_error(good.path, source, EVAL)
    wrong_error = relative_error(wrong.path, source, EVAL)
    assert good_error < 0.1
    assert wrong_error > max(0.2, 5 * good_error)


def test_excluded_nodes_stay_in_float(prepared: PreparedModel, tmp_path: Path) -> None:
    nodes = onnx.load(prepared.path).graph.node
    conv = next(n.name for n in nodes if n.op_type == "Conv")
    candidate = quantize_static_int8(
        prepared, CALIBRATION, tmp_path, nodes_to_exclude=[conv], name="mixed"
    )
    assert candidate.recipe["excluded"] == [conv]
    again = quantize_static_int8(prepared, CALIBRATION, tmp_path, StaticSettings(per_channel=True))
    assert again.recipe["excluded"] == []
    # the ranges were calibrated once for both
    caches = [p.name for p in (tmp_path / "calibration").iterdir()]
    assert len([c for c in caches if not c.endswith(".unrepresentable.json")]) == 1
    graph = onnx.load(candidate.path).graph
    dequantized = {t for n in graph.node if n.op_type == "DequantizeLinear" for t in n.output}
    kept = next(n for n in graph.node if n.name == conv)
    assert not set(kept.input) & dequantized  # reads float input and float weights
    with pytest.raises(InvalidArgumentError, match="'nope'"):
        quantize_static_int8(prepared, CALIBRATION, tmp_path, nodes_to_exclude=["nope"])


def test_external_data_models_stay_external_and_the_source_untouched(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    onnx.save(
        small_cnn(),
        source / "model.onnx",
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    before = sorted(p.name for p in source.iterdir())
    work = tmp_path / "work"
    prepared = prepare_model(source / "model.onnx", work)
    assert prepared.external_data
    for candidate in (
        quantize_dynamic_int8(prepared, work),
        quantize_static_int8(prepared, CALIBRATION, work),
    ):
        assert sorted(p.name for p in candidate.path.parent.iterdir()) == [
            "model.onnx",
            "model.onnx.data",
        ]
        assert relative_error(candidate.path, source / "model.onnx", EVAL) < 0.1
    assert sorted(p.name for p in source.iterdir()) == before


def test_a_model_the_runtime_cannot_run_is_skipped_with_reasons(tmp_path: Path) -> None:
    node = helper.make_node("Mystery", ["x"], ["y"], domain="example.custom")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(np.eye(4, dtype=np.float32), "W")],
    )
    graph.node[1].input[0] = "h"
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)],
    )
    model.ir_version = 8
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    prepared = prepare_model(path, tmp_path / "work")
    assert any("pre-processing failed" in note for note in prepared.notes)
    assert any("could not optimize" in note for note in prepared.notes)
    with pytest.raises(CandidateSkipped) as info:
        quantize_dynamic_int8(prepared, tmp_path / "work")
    assert "\n" not in str(info.value)
    data = Dataset({"x": np.ones((4, 4), np.float32)}, None, "ones")
    with pytest.raises(CandidateSkipped, match="quantizer failed"):
        quantize_static_int8(prepared, data, tmp_path / "work")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00not a model")
    with pytest.raises(InvalidArgumentError, match=r"garbage\.onnx: not a readable ONNX model"):
        prepare_model(garbage, tmp_path / "work")


def test_calibration_reader_batches_the_rows() -> None:
    data = Dataset({"x": np.arange(10, dtype=np.float32).reshape(10, 1)}, None, "rows")
    reader = CalibrationReader(data, batch_size=4)
    assert isinstance(reader, CalibrationDataReader)
    assert len(reader) == 3
    assert [b["x"].ravel().tolist() for b in reader] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9],
    ]
    assert reader.get_next() is None
    reader.rewind()
    assert reader.get_next() is not None
    reader.set_range(1, 2)
    assert [b["x"].ravel().tolist() for b in reader] == [[4, 5, 6, 7]]
    with pytest.raises(InvalidArgumentError, match="at least 1"):
        CalibrationReader(data, batch_size=0)


def test_settings_are_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown calibration method 'mse'"):
        StaticSettings(method="mse")
    with pytest.raises(InvalidArgumentError, match="activation type"):
        StaticSettings(activation="int4")
    with pytest.raises(InvalidArgumentError, match="percentile"):
        StaticSettings(method="percentile", percentile=0)
    assert StaticSettings(method="entropy", per_channel=True).suffix() == "entropy-pc"


def masked_attention() -> onnx.ModelProto:
    """softmax(x W + (1 - m) * finfo.min) V: the mask path of an exported transformer."""
    rng = np.random.default_rng(3)
    weights = {
        "W": rng.normal(0, 0.5, (8, 8)).astype(np.float32),
        "V": rng.normal(0, 0.5, (8, 4)).astype(np.float32),
        "one": np.array(1.0, np.float32),
        "lowest": np.array(np.finfo(np.float32).min, np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["scores"], name="scores"),
        helper.make_node("Sub", ["one", "m"], ["inverted"], name="invert"),
        helper.make_node("Mul", ["inverted", "lowest"], ["bias"], name="bias"),
        helper.make_node("Add", ["scores", "bias"], ["masked"], name="mask"),
        helper.make_node("Softmax", ["masked"], ["weights"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["weights", "V"], ["y"], name="values"),
    ]
    graph = helper.make_graph(
        nodes,
        "masked",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8]),
            helper.make_tensor_value_info("m", TensorProto.FLOAT, ["N", 8]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(w, n) for n, w in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_tensors_no_8_bit_range_holds_stay_in_float(tmp_path: Path, method: str) -> None:
    source = tmp_path / "masked.onnx"
    onnx.save(masked_attention(), source)
    rng = np.random.default_rng(4)

    def rows(count: int) -> dict[str, Array]:
        mask = (rng.random((count, 8)) < 0.7).astype(np.float32)
        mask[:, 0] = 1
        return {"x": rng.normal(0, 1, (count, 8)).astype(np.float32), "m": mask}

    prepared = prepare_model(source, tmp_path / "work")
    data = Dataset(rows(64), None, "masked rows")
    candidate = quantize_static_int8(
        prepared, data, tmp_path / "work", StaticSettings(method=method)
    )
    assert set(candidate.recipe["unrepresentable_tensors"]) == {"bias", "masked"}
    # pre-processing may fuse the scores' MatMul and the mask's Add: ask the prepared graph
    touching = {
        n.name
        for n in onnx.load(prepared.path).graph.node
        if {"bias", "masked"} & {*n.input, *n.output}
    }
    assert "softmax" in touching
    assert touching <= set(candidate.recipe["excluded"])
    assert any("no 8-bit range holds" in note for note in candidate.notes)
    held_out = rows(64)
    session = ort.InferenceSession(str(candidate.path), providers=["CPUExecutionProvider"])
    want = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(
        None, held_out
    )[0]
    got = session.run(None, held_out)[0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.1
