"""Where a winner goes: the model's next version when it runs on the same runtime with the same
parameters (the policy widened, the config's comments kept), a new model beside it otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferd.codecs.model_config import parse_pbtxt
from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.candidate import OPENVINO_PLATFORM, Candidate
from inferd.tools.optimize.staging import candidate_config
from inferd.tools.optimize.write import next_version, write_winner

ONNX_CONFIG = """# an ONNX model
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" } ]
"""

TORCH_CONFIG = """name: "t"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" } ]
parameters { key: "INFERENCE_MODE" value: { string_value: "true" } }
"""


def _model(root: Path, name: str, config: str, filename: str) -> Path:
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / filename).write_bytes(b"old")
    (model_dir / "config.pbtxt").write_text(config)
    (model_dir / "labels.txt").write_text("a\nb\nc\n")
    return model_dir


def _candidate(tmp: Path, platform: str = "onnxruntime_onnx", **params: str) -> Candidate:
    folder = tmp / "built"
    folder.mkdir(exist_ok=True)
    if platform == OPENVINO_PLATFORM:
        (folder / "x.xml").write_text("<net/>")
        (folder / "x.bin").write_bytes(b"w")
        return Candidate("ov", "openvino", folder / "x.xml", platform, parameters=params)
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
    )
    onnx.save(helper.make_model(graph), str(folder / "new.onnx"))
    return Candidate("c", "int8-static", folder / "new.onnx", platform, parameters=params)


def test_same_runtime_becomes_the_next_version(tmp_path: Path) -> None:
    model_dir = _model(tmp_path / "repo", "m", ONNX_CONFIG, "model.onnx")
    baseline = parse_pbtxt(ONNX_CONFIG, "test")
    written = write_winner(
        _candidate(tmp_path), baseline, model_dir, output_model=None, provenance={"k": 1}
    )
    assert (written.model, written.version, written.new_model) == ("m", 2, False)
    assert (model_dir / "2" / "model.onnx").is_file()
    assert (model_dir / "1" / "model.onnx").read_bytes() == b"old"
    assert json.loads((model_dir / "2" / "optimized.json").read_text()) == {"k": 1}
    text = (model_dir / "config.pbtxt").read_text()
    assert text.startswith("# an ONNX model")
    config = parse_pbtxt(text, "after")
    assert config.version_policy.latest.num_versions == 2
    assert next_version(model_dir) == 3


def test_a_specific_policy_gets_the_new_version(tmp_path: Path) -> None:
    text = ONNX_CONFIG + "version_policy: { specific: { versions: [ 1 ] } }\n"
    model_dir = _model(tmp_path / "repo", "m", text, "model.onnx")
    write_winner(
        _candidate(tmp_path), parse_pbtxt(text, "t"), model_dir, output_model=None, provenance={}
    )
    config = parse_pbtxt((model_dir / "config.pbtxt").read_text(), "after")
    assert sorted(config.version_policy.specific.versions) == [1, 2]


def test_another_runtime_becomes_a_new_model_beside_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    model_dir = _model(repo, "t", TORCH_CONFIG, "model.pt")
    baseline = parse_pbtxt(TORCH_CONFIG, "t")
    written = write_winner(
        _candidate(tmp_path), baseline, model_dir, output_model=None, provenance={}
    )
    assert (written.model, written.version, written.new_model) == ("t_optimized", 1, True)
    target = repo / "t_optimized"
    assert (target / "1" / "model.onnx").is_file()
    assert (target / "labels.txt").read_text() == "a\nb\nc\n"
    config = parse_pbtxt((target / "config.pbtxt").read_text(), "new")
    assert config.name == "t_optimized"
    assert config.platform == "onnxruntime_onnx"
    assert "INFERENCE_MODE" not in config.parameters  # the torch runtime's, refused by ONNX
    assert config.input[0].name == "INPUT__0"
    assert (model_dir / "config.pbtxt").read_text() == TORCH_CONFIG  # the baseline untouched
    with pytest.raises(InvalidArgumentError, match="exists"):
        write_winner(_candidate(tmp_path), baseline, model_dir, output_model=None, provenance={})


def test_openvino_parameters_travel_with_the_config(tmp_path: Path) -> None:
    baseline = parse_pbtxt(ONNX_CONFIG, "t")
    candidate = _candidate(tmp_path, OPENVINO_PLATFORM, HINT_BF16="YES")
    config = candidate_config(baseline, candidate, "m_ov")
    assert config.backend == "openvino"
    assert config.platform == ""
    assert config.parameters["HINT_BF16"].string_value == "YES"
    model_dir = _model(tmp_path / "repo", "m", ONNX_CONFIG, "model.onnx")
    written = write_winner(candidate, baseline, model_dir, output_model="m_ov", provenance={})
    assert written.new_model
    assert (model_dir.parent / "m_ov" / "1" / "model.xml").is_file()
    assert (model_dir.parent / "m_ov" / "1" / "model.bin").read_bytes() == b"w"
