"""What a new user meets first: the README's commands, run as written, from a clone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
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


def _inferd(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_optimize_exits_with_its_documented_code_for_an_unloadable_model(
    tmp_path: Path,
) -> None:
    pytest.importorskip("rich")
    pytest.importorskip("plotly")
    documented = re.search(r"(\d+) model not loadable", _inferd("optimize", "--help").stdout)
    assert documented is not None
    model = tmp_path / "repo" / "broken"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.onnx").write_bytes(b"not an onnx file")
    (model / "config.pbtxt").write_text(
        'name: "broken"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [4] }]\n'
    )
    rows = np.ones((8, 4), dtype=np.float32)
    np.savez(tmp_path / "calibration.npz", x=rows)
    np.savez(tmp_path / "eval.npz", x=rows)
    done = _inferd(
        "optimize", "broken", "--model-repository", tmp_path / "repo",
        "--calibration", tmp_path / "calibration.npz", "--eval", tmp_path / "eval.npz",
        "--results", tmp_path / "results",
    )  # fmt: skip
    assert done.returncode == int(documented.group(1)), done.stderr
    assert "inferd optimize: error: model 'broken' could not be loaded" in done.stderr
    assert "INVALID_PROTOBUF" in done.stdout + done.stderr  # the reason is in the log
    assert sorted(p.name for p in model.iterdir()) == ["1", "config.pbtxt"]  # nothing written


_TRITON_MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""

_TYPED_MODEL_PY = """
from inferd.backends.python.api import Model


class Echo(Model):
    def predict(self, inputs):
        return {"OUT": inputs["IN"]}
"""


@pytest.mark.parametrize("source", [_TRITON_MODEL_PY, _TYPED_MODEL_PY], ids=["triton", "typed"])
def test_a_model_py_without_config_is_refused_naming_what_to_add(
    source: str, tmp_path: Path
) -> None:
    (tmp_path / "repo" / "echo" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "echo" / "1" / "model.py").write_text(source)
    (tmp_path / "repo" / "simple").symlink_to(COMMITTED / "simple", target_is_directory=True)
    with running_server([tmp_path / "repo"], ["--exit-on-error=false"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["simple"]["state"] == "READY"
        assert index["echo"]["state"] == "UNAVAILABLE"
        reason = index["echo"]["reason"]
    assert "declares no inputs or outputs" in reason
    assert f"{tmp_path / 'repo' / 'echo'} has no config.pbtxt" in reason
    assert f'Add {tmp_path / "repo" / "echo" / "config.pbtxt"} with backend: "python"' in reason
    assert "input [" in reason
    assert "output [" in reason
    assert "auto_complete_config" in reason


def test_a_batch_above_max_batch_size_is_refused_saying_how_to_raise_it(
    example_repo: Path,
) -> None:
    rows = [[1] * 16] * 9  # simple's max_batch_size is 8
    body = {
        "inputs": [
            {"name": name, "shape": [9, 16], "datatype": "INT32", "data": rows}
            for name in ("INPUT0", "INPUT1")
        ]
    }
    with running_server([example_repo], ["--model-control-mode", "explicit",
                                         "--load-model", "simple"]) as server:  # fmt: skip
        answer = httpx.post(
            f"http://{server.http_url}/v2/models/simple/infer", json=body, timeout=30
        )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error.startswith("inference request batch-size must be <= 8 for 'simple', got 9")
    assert "send at most 8 rows per request" in error
    assert "raise max_batch_size in the model's config.pbtxt" in error
    assert "in the 'config' of a load request" in error
