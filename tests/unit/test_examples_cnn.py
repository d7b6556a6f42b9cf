"""The digits CNN ships twice, ONNX in examples/models and TorchScript in examples/models-torch:
both give the same answers, every model of examples/models serves without PyTorch, and the docs
state one count of the example models."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

import onnxruntime as ort
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from inferd.examples.build import build_examples
from inferd.examples.digits_models import digits_split
from inferd.examples.names import EXAMPLE_COUNT, MODEL_NAMES, TORCH_MODEL_NAMES

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "examples" / "models"
COMMITTED_TORCH = ROOT / "examples" / "models-torch"
needs_clone = pytest.mark.skipif(
    not COMMITTED_TORCH.is_dir(), reason="committed example repositories not present"
)
# runtimes that the default install (`pip install -e ".[examples]"`) brings
DEFAULT_PLATFORMS = {"onnxruntime_onnx", "ensemble", ""}
DEFAULT_BACKENDS = {"onnxruntime", "python", "fil", "sklearn", ""}


def _config(folder: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def _onnx_answers(model_file: Path, images: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    out: np.ndarray = session.run(["OUTPUT__0"], {"INPUT__0": images})[0]
    return out


def _torch_answers(model_file: Path, images: np.ndarray) -> np.ndarray:
    torch = pytest.importorskip("torch")
    module = torch.jit.load(str(model_file), map_location="cpu")
    with torch.inference_mode():
        out: np.ndarray = module(torch.from_numpy(images)).numpy()
    return out


def _held_out() -> tuple[np.ndarray, np.ndarray]:
    _, x_test, _, y_test = digits_split()
    return x_test.reshape(-1, 1, 8, 8), y_test


@needs_clone
def test_the_committed_onnx_cnn_answers_as_the_torchscript_one() -> None:
    images, labels = _held_out()
    onnx_prob = _onnx_answers(COMMITTED / "digits_cnn" / "1" / "model.onnx", images)
    torch_prob = _torch_answers(COMMITTED_TORCH / "digits_cnn_torch" / "1" / "model.pt", images)
    np.testing.assert_array_equal(np.argmax(onnx_prob, 1), np.argmax(torch_prob, 1))
    np.testing.assert_allclose(onnx_prob, torch_prob, atol=1e-5)
    assert np.mean(np.argmax(onnx_prob, 1) == labels) > 0.95


def test_a_fresh_build_of_both_cnns_agrees(example_repo: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    assert build_examples(tmp_path, progress=False, names=TORCH_MODEL_NAMES) == ["digits_cnn_torch"]
    images, _ = _held_out()
    onnx_prob = _onnx_answers(example_repo / "digits_cnn" / "1" / "model.onnx", images)
    torch_prob = _torch_answers(tmp_path / "digits_cnn_torch" / "1" / "model.pt", images)
    np.testing.assert_array_equal(np.argmax(onnx_prob, 1), np.argmax(torch_prob, 1))
    cnn, torch_cnn = _config(example_repo / "digits_cnn"), _config(tmp_path / "digits_cnn_torch")
    assert (cnn.platform, torch_cnn.platform) == ("onnxruntime_onnx", "pytorch_libtorch")
    assert cnn.input == torch_cnn.input
    assert cnn.output == torch_cnn.output


@needs_clone
def test_examples_models_needs_no_torch_and_models_torch_is_current(
    example_repo: Path, tmp_path: Path
) -> None:
    for name in MODEL_NAMES:
        cfg = _config(COMMITTED / name)
        assert cfg.platform in DEFAULT_PLATFORMS, (name, cfg.platform)
        assert cfg.backend in DEFAULT_BACKENDS, (name, cfg.backend)
    assert sorted(p.name for p in COMMITTED_TORCH.iterdir()) == sorted(TORCH_MODEL_NAMES)
    pytest.importorskip("torch")
    build_examples(tmp_path, progress=False, names=TORCH_MODEL_NAMES)
    for name in TORCH_MODEL_NAMES:
        assert (COMMITTED_TORCH / name / "config.pbtxt").read_text() == (
            tmp_path / name / "config.pbtxt"
        ).read_text(), f"examples/models-torch/{name} is stale: rebuild it (examples/README.md)"


_COUNTED = re.compile(r"\b(\d+)\s+example\s+models\b")


@needs_clone
@pytest.mark.parametrize("doc", ["README.md", "examples/README.md"])
def test_the_docs_state_one_count_of_the_example_models(doc: str) -> None:
    text = (ROOT / doc).read_text()
    counts = {int(n) for n in _COUNTED.findall(text)}
    assert counts == {EXAMPLE_COUNT}, f"{doc} states {sorted(counts)} example models"


def test_the_cli_states_the_same_count() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "repo", "build-examples", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert f"{EXAMPLE_COUNT} example models" in " ".join(done.stdout.split())
