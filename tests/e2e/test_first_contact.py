"""What a new user meets first: the README's commands, run as written, from a clone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.examples.digits_models import digits_split
from inferd.examples.names import MODEL_NAMES
from inferd.testing import running_server

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "examples" / "models"

_NO_TORCH = (
    "raise ModuleNotFoundError(\"No module named 'torch' (hidden by the test)\", name='torch')\n"
)


@pytest.fixture
def without_torch(tmp_path: Path) -> dict[str, str]:
    """An environment whose interpreter cannot import torch, as after the README's first
    install (``pip install -e ".[examples]"`` brings no PyTorch)."""
    hidden = tmp_path / "no-torch"
    (hidden / "torch").mkdir(parents=True)
    (hidden / "torch" / "__init__.py").write_text(_NO_TORCH)
    return {"PYTHONPATH": str(hidden)}


@pytest.mark.skipif(not COMMITTED.is_dir(), reason="committed example repository not present")
def test_the_committed_examples_serve_whole_without_torch(without_torch: dict[str, str]) -> None:
    """The README's first command, without PyTorch: every model loads (the server would exit
    otherwise), the server is ready, and the CNN answers through ONNX Runtime."""
    with running_server([COMMITTED], env=without_torch, startup_timeout_s=180.0) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_server_ready()
        index = {m["name"]: m.get("state") for m in client.get_model_repository_index()}
        assert index == dict.fromkeys(MODEL_NAMES, "READY")
        assert client.get_model_config("digits_cnn")["platform"] == "onnxruntime_onnx"
        _, x_test, _, y_test = digits_split()
        images = x_test[:32].reshape(-1, 1, 8, 8)
        inp = httpclient.InferInput("INPUT__0", list(images.shape), "FP32")
        inp.set_data_from_numpy(images)
        probabilities = client.infer("digits_cnn", [inp]).as_numpy("OUTPUT__0")
        assert probabilities.shape == (32, 10)
        assert np.mean(np.argmax(probabilities, axis=1) == y_test[:32]) > 0.9
