"""The example repository builder: every model computes what its config promises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")

import onnxruntime as ort
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from inferd.errors import AlreadyExistsError
from inferd.examples.build import MODEL_NAMES, build_examples, digits_split

SIMPLE_MODELS = ("simple", "simple_int8", "simple_string")
COMMITTED = Path(__file__).resolve().parents[2] / "examples" / "models"


MODEL_FILES = {
    "model.onnx",
    "model.pt",
    "model.pt2",
    "model.py",
    "xgboost.json",
    "xgboost.ubj",
    "model.skops",
}


@pytest.fixture(scope="module")
def repo(example_repo: Path) -> Path:
    """The session's example repository (built once by tests/conftest.py)."""
    return example_repo


def _session(repo: Path, name: str) -> Any:
    return ort.InferenceSession(
        str(repo / name / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )


def _run_simple(repo: Path, name: str, x: Any, y: Any) -> tuple[Any, Any]:
    out0, out1 = _session(repo, name).run(["OUTPUT0", "OUTPUT1"], {"INPUT0": x, "INPUT1": y})
    return out0, out1


def _config(repo: Path, name: str) -> Any:
    text = (repo / name / "config.pbtxt").read_text()
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_layout(repo: Path) -> None:
    names = sorted(p.name for p in repo.iterdir())
    assert names == sorted(MODEL_NAMES)  # no scratch folder left behind
    for name in MODEL_NAMES:
        assert (repo / name / "config.pbtxt").is_file()
        files = {p.name for p in (repo / name / "1").iterdir()}
        if _config(repo, name).platform == "ensemble":
            continue  # an ensemble runs other models: its version folder holds no model
        assert files & MODEL_FILES, f"{name} has no model file: {sorted(files)}"
    assert (repo / "digits" / "1" / "model.onnx").stat().st_size < 1_000_000
    assert (repo / "digits" / "labels.txt").read_text().split() == [str(d) for d in range(10)]


def test_simple_adds_and_subtracts(repo: Path) -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(-1000, 1000, size=(5, 16), dtype=np.int32)
    y = rng.integers(-1000, 1000, size=(5, 16), dtype=np.int32)
    total, diff = _run_simple(repo, "simple", x, y)
    assert total.dtype == np.int32
    np.testing.assert_array_equal(total, x + y)
    np.testing.assert_array_equal(diff, x - y)
    one = np.ones((1, 16), dtype=np.int32)
    total, diff = _run_simple(repo, "simple", one, one)
    assert total.tolist() == [[2] * 16]
    assert diff.tolist() == [[0] * 16]


def test_simple_int8_wraps_like_int8(repo: Path) -> None:
    x = np.array([[127, -128, 100, -100] * 4], dtype=np.int8)
    y = np.array([[1, 1, 100, 100] * 4], dtype=np.int8)
    total, diff = _run_simple(repo, "simple_int8", x, y)
    assert total.dtype == np.int8
    assert total[0, :4].tolist() == [-128, -127, -56, 0]
    assert diff[0, :4].tolist() == [126, 127, 0, 56]
    wide_x, wide_y = x.astype(np.int32), y.astype(np.int32)
    np.testing.assert_array_equal(total, (wide_x + wide_y).astype(np.int8))
    np.testing.assert_array_equal(diff, (wide_x - wide_y).astype(np.int8))


def test_simple_string_computes_on_decimal_text(repo: Path) -> None:
    numbers_x = np.arange(-8, 8).reshape(1, 16) * 1234
    numbers_y = np.arange(16).reshape(1, 16) - 3
    x = np.array([[str(v) for v in numbers_x[0]]], dtype=object)
    y = np.array([[str(v) for v in numbers_y[0]]], dtype=object)
    total, diff = _run_simple(repo, "simple_string", x, y)
    assert [int(v) for v in total[0]] == (numbers_x + numbers_y)[0].tolist()
    assert [int(v) for v in diff[0]] == (numbers_x - numbers_y)[0].tolist()
    assert total[0, 8] == str(numbers_x[0, 8] + numbers_y[0, 8])  # plain decimal, no padding


def test_digits_classifies_held_out_images(repo: Path) -> None:
    _, x_test, _, y_test = digits_split()
    session = _session(repo, "digits")
    labels, probs = session.run(["label", "probabilities"], {"input": x_test[:32]})
    assert labels.shape == (32, 1)
    assert labels.dtype == np.int64
    assert probs.shape == (32, 10)
    assert probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    predicted = np.concatenate(
        [session.run(["label"], {"input": x_test[i : i + 32]})[0] for i in range(0, 450, 32)]
    )[:, 0]
    assert len(predicted) == len(y_test)
    assert np.mean(predicted == y_test) > 0.9


def test_configs_parse_as_triton_model_config(repo: Path) -> None:
    for name in SIMPLE_MODELS:
        cfg = _config(repo, name)
        assert cfg.name == name
        assert cfg.platform == "onnxruntime_onnx"
        assert cfg.max_batch_size == 8
        assert [i.name for i in cfg.input] == ["INPUT0", "INPUT1"]
        assert [o.name for o in cfg.output] == ["OUTPUT0", "OUTPUT1"]
        assert all(list(t.dims) == [16] for t in [*cfg.input, *cfg.output])
        assert cfg.WhichOneof("scheduling_choice") is None
        assert not cfg.HasField("version_policy")
    wanted = {
        "simple": model_config_pb2.TYPE_INT32,
        "simple_int8": model_config_pb2.TYPE_INT8,
        "simple_string": model_config_pb2.TYPE_STRING,
    }
    for name, dtype in wanted.items():
        assert {t.data_type for t in [*_config(repo, name).input, *_config(repo, name).output]} == {
            dtype
        }

    digits = _config(repo, "digits")
    assert digits.max_batch_size == 32
    assert [(i.name, i.data_type, list(i.dims)) for i in digits.input] == [
        ("input", model_config_pb2.TYPE_FP32, [64])
    ]
    assert [(o.name, o.data_type, list(o.dims), o.label_filename) for o in digits.output] == [
        ("label", model_config_pb2.TYPE_INT64, [1], ""),
        ("probabilities", model_config_pb2.TYPE_FP32, [10], "labels.txt"),
    ]
    assert "Held-out test accuracy: 0.9" in (repo / "digits" / "config.pbtxt").read_text()


def test_rebuild_is_byte_identical_for_simple_models(repo: Path, tmp_path: Path) -> None:
    build_examples(tmp_path, progress=False)
    for name in SIMPLE_MODELS:
        for rel in ("config.pbtxt", "1/model.onnx"):
            assert (tmp_path / name / rel).read_bytes() == (repo / name / rel).read_bytes()


@pytest.mark.skipif(not COMMITTED.is_dir(), reason="committed example repository not present")
def test_committed_simple_models_are_current(repo: Path) -> None:
    for name in SIMPLE_MODELS:
        for rel in ("config.pbtxt", "1/model.onnx"):
            assert (COMMITTED / name / rel).read_bytes() == (repo / name / rel).read_bytes(), (
                f"examples/models/{name}/{rel} is stale: "
                "run python -m inferd.examples.build --output examples/models --force"
            )


@pytest.mark.skipif(not COMMITTED.is_dir(), reason="committed example repository not present")
def test_the_committed_repository_holds_every_example_model(repo: Path) -> None:
    """The README serves examples/models: every model the builder makes is there, with the
    builder's config."""
    missing = [name for name in MODEL_NAMES if not (COMMITTED / name / "config.pbtxt").is_file()]
    assert not missing, (
        f"examples/models lacks {missing}: run inferd repo build-examples --output "
        "examples/models and commit the new folders"
    )
    stale = [
        name
        for name in MODEL_NAMES
        if (COMMITTED / name / "config.pbtxt").read_text()
        != (repo / name / "config.pbtxt").read_text()
        and name != "digits"  # its config quotes the accuracy of the committed build
    ]
    assert not stale, f"examples/models has stale configs: {stale}"
    # Python models are written from the builder's source text: the committed copy is that text
    stale_code = [
        name
        for name in MODEL_NAMES
        if (repo / name / "1" / "model.py").is_file()
        and (COMMITTED / name / "1" / "model.py").read_bytes()
        != (repo / name / "1" / "model.py").read_bytes()
    ]
    assert not stale_code, f"examples/models has stale Python models: {stale_code}"


def test_existing_models_need_force(tmp_path: Path) -> None:
    (tmp_path / "simple").mkdir()
    (tmp_path / "unrelated").mkdir()
    with pytest.raises(AlreadyExistsError, match="simple"):
        build_examples(tmp_path, progress=False)
    assert not (tmp_path / "digits").exists()  # refused before writing anything
    build_examples(tmp_path, force=True, progress=False)
    assert (tmp_path / "simple" / "1" / "model.onnx").is_file()
    assert (tmp_path / "unrelated").is_dir()  # other models are left alone
