"""Code is code, whatever the file is called: uploads judged by their bytes and effective config,
loader trust only from the operator's repository, model files confined to their version folder.

Real ``inferd serve --model-control-mode explicit`` processes driven by tritonclient (HTTP and
gRPC). The probe: a skops pipeline whose first step is ``FunctionTransformer(func=pickle.loads)``
unpickles whatever a client sends once a load request trusts ``_pickle.loads``.
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import skops.io as sio
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import ADD_SUB_CONFIG, ADD_SUB_CONFIG_JSON, add_sub_model, write_add_sub

pytestmark = pytest.mark.e2e

TRUSTED = "skops_trusted_types"
EXPLICIT = ["--model-control-mode", "explicit"]


def sklearn_config(params: dict[str, str] | None = None) -> dict[str, Any]:
    """The unpickling pipeline's config: raw bytes in (a [1, n] UINT8 row), a label out."""
    return {
        "backend": "sklearn",
        "max_batch_size": 0,
        "input": [{"name": "X", "data_type": "TYPE_UINT8", "dims": [1, -1]}],
        "output": [{"name": "Y", "data_type": "TYPE_INT64", "dims": [1, 1]}],
        "parameters": {k: {"string_value": v} for k, v in (params or {}).items()},
    }


TORCH_CONFIG = {
    "platform": "pytorch_libtorch",
    "default_model_filename": "model.bin",
    "max_batch_size": 0,
    "input": [{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [2]}],
    "output": [{"name": "OUTPUT__0", "data_type": "TYPE_FP32", "dims": [2]}],
}

ONNX_CONFIG = ADD_SUB_CONFIG_JSON


class Touch:
    """Unpickled, it creates the file ``path`` (the probe's stand-in for any command)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


@dataclass(frozen=True)
class Files:
    unpickler: bytes  # skops: FunctionTransformer(pickle.loads) then a fitted classifier
    plain: bytes  # skops: a fitted classifier, only types in skops' safe set
    torchscript: bytes


@pytest.fixture(scope="module")
def files() -> Files:
    rng = np.random.default_rng(0)
    x = rng.random((40, 4))
    classifier = LogisticRegression().fit(x, (x[:, 0] > 0.5).astype(np.int64))
    pipeline = Pipeline(
        [("unpickle", FunctionTransformer(func=pickle.loads)), ("classify", classifier)]
    )
    script = io.BytesIO()
    torch.jit.save(torch.jit.script(Double()), script)
    return Files(sio.dumps(pipeline), sio.dumps(classifier), script.getvalue())


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid ONNX file outside the repository, for a model file symlinked out of it."""
    path = tmp_path_factory.mktemp("outside") / "model.onnx"
    path.write_bytes(add_sub_model())
    return path


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, files: Files, outside: Path) -> Path:
    root = tmp_path_factory.mktemp("repo")
    write_add_sub(root, "simple")
    # the operator trusts the unpickling step in the repository's own config.pbtxt
    trusted = root / "operator_pipeline"
    (trusted / "1").mkdir(parents=True)
    (trusted / "1" / "model.skops").write_bytes(files.unpickler)
    (trusted / "config.pbtxt").write_text(
        'backend: "sklearn"\nmax_batch_size: 0\n'
        'input { name: "X" data_type: TYPE_UINT8 dims: [ 1, -1 ] }\n'
        'output { name: "Y" data_type: TYPE_INT64 dims: [ 1, 1 ] }\n'
        f'parameters {{ key: "{TRUSTED}" value {{ string_value: "_pickle.loads" }} }}\n'
    )
    # a model whose default model file is a symlink out of its version folder
    linked = root / "linked"
    (linked / "1").mkdir(parents=True)
    (linked / "config.pbtxt").write_text(ADD_SUB_CONFIG.replace("{name}", "linked"))
    (linked / "1" / "model.onnx").symlink_to(outside)
    return root


@pytest.fixture(scope="module")
def locked(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo], EXPLICIT) as proc:
        yield proc


@pytest.fixture(scope="module")
def uploads(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo], [*EXPLICIT, "--allow-model-upload"]) as proc:
        yield proc


@pytest.fixture(scope="module")
def code_uploads(repo: Path) -> Iterator[ServerProcess]:
    args = [*EXPLICIT, "--allow-model-upload", "--allow-code-upload"]
    with running_server([repo], args) as proc:
        yield proc


def _bytes_input(payload: bytes) -> httpclient.InferInput:
    row = np.frombuffer(payload, dtype=np.uint8).reshape(1, -1)
    tensor = httpclient.InferInput("X", list(row.shape), "UINT8")
    tensor.set_data_from_numpy(row)
    return tensor


def _refusal(client: Any, name: str, status: str, **kwargs: Any) -> str:
    """The message of the load of ``name`` refused with ``status``."""
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(name, **kwargs)
    assert caught.value.status() == status, caught.value.message()
    return str(caught.value.message())


def test_probe_upload_trusting_pickle_loads_is_refused(
    uploads: ServerProcess, files: Files, tmp_path: Path
) -> None:
    """The probe as it was run: refused, and the pickle it then sends never runs."""
    marker = tmp_path / "marker"
    config = json.dumps(sklearn_config({TRUSTED: "_pickle.loads"}))
    with httpclient.InferenceServerClient(uploads.http_url) as client:
        refused: InferenceServerException | None = None
        try:
            client.load_model("probe", config=config, files={"file:1/model.skops": files.unpickler})
        except InferenceServerException as exc:
            refused = exc
        if refused is None:  # what the probe did next; the step after the unpickler then fails
            with contextlib.suppress(InferenceServerException):
                client.infer("probe", [_bytes_input(pickle.dumps(Touch(marker)))])
        assert not marker.exists()
        assert refused is not None
        assert refused.status() == "403"
        assert f"'{TRUSTED}'" in refused.message()
        assert not client.is_model_ready("probe")


def test_skops_file_with_types_beyond_the_safe_set_is_code(
    uploads: ServerProcess, files: Files
) -> None:
    """Without the override, the same file is still code: judged by its content."""
    config = json.dumps(sklearn_config())
    upload = {"file:1/model.skops": files.unpickler}
    with httpclient.InferenceServerClient(uploads.http_url) as client:
        message = _refusal(client, "probe_plain", "403", config=config, files=upload)
        assert "'1/model.skops'" in message
        assert "_pickle.loads" in message
        assert "--allow-code-upload" in message
    with grpcclient.InferenceServerClient(uploads.grpc_url) as client:
        message = _refusal(
            client, "probe_plain", "StatusCode.PERMISSION_DENIED", config=config, files=upload
        )
        assert "'1/model.skops'" in message


def test_plain_skops_upload_needs_only_model_uploads(uploads: ServerProcess, files: Files) -> None:
    config = sklearn_config()
    config["input"][0].update(data_type="TYPE_FP64", dims=[1, 4])
    with httpclient.InferenceServerClient(uploads.http_url) as client:
        client.load_model(
            "plain_skops", config=json.dumps(config), files={"file:1/model.skops": files.plain}
        )
        row = np.zeros((1, 4), dtype=np.float64)
        tensor = httpclient.InferInput("X", [1, 4], "FP64")
        tensor.set_data_from_numpy(row)
        result = client.infer("plain_skops", [tensor]).as_numpy("Y")
        assert result is not None
        assert result.shape == (1, 1)
        client.unload_model("plain_skops")


def test_operator_trust_in_the_repository_still_works(locked: ServerProcess) -> None:
    benign = pickle.dumps(np.zeros((1, 4)))
    with httpclient.InferenceServerClient(locked.http_url) as client:
        client.load_model("operator_pipeline")
        result = client.infer("operator_pipeline", [_bytes_input(benign)]).as_numpy("Y")
        assert result is not None
        assert result.shape == (1, 1)
        assert int(result[0, 0]) in (0, 1)


@pytest.mark.parametrize("server", ["locked", "uploads"])
def test_client_override_cannot_set_trusted_types(
    server: str, request: pytest.FixtureRequest
) -> None:
    """Whether or not uploads are enabled, over HTTP and gRPC, by name."""
    proc: ServerProcess = request.getfixturevalue(server)
    config = json.dumps(sklearn_config({TRUSTED: "_pickle.loads"}))
    with httpclient.InferenceServerClient(proc.http_url) as client:
        message = _refusal(client, "operator_pipeline", "403", config=config)
        assert f"'{TRUSTED}'" in message
        # a library path of another backend, in any case
        onnx = json.loads(ONNX_CONFIG)
        onnx["parameters"] = {"cpu_extension_path": {"string_value": "/tmp/libevil.so"}}
        message = _refusal(client, "simple", "403", config=json.dumps(onnx))
        assert "'cpu_extension_path'" in message
    with grpcclient.InferenceServerClient(proc.grpc_url) as client:
        message = _refusal(
            client, "operator_pipeline", "StatusCode.PERMISSION_DENIED", config=config
        )
        assert f"'{TRUSTED}'" in message


def _double(client: httpclient.InferenceServerClient, name: str) -> Any:
    tensor = httpclient.InferInput("INPUT__0", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1.5, -2.0], dtype=np.float32))
    return client.infer(name, [tensor]).as_numpy("OUTPUT__0")


def test_torchscript_named_model_bin_needs_code_uploads(
    uploads: ServerProcess, code_uploads: ServerProcess, files: Files
) -> None:
    upload = {"file:1/model.bin": files.torchscript}
    with httpclient.InferenceServerClient(uploads.http_url) as client:
        message = _refusal(client, "script", "403", config=json.dumps(TORCH_CONFIG), files=upload)
        assert "'1/model.bin'" in message
        assert "--allow-code-upload" in message
        assert not client.is_model_ready("script")
    with grpcclient.InferenceServerClient(uploads.grpc_url) as client:
        message = _refusal(
            client,
            "script",
            "StatusCode.PERMISSION_DENIED",
            config=json.dumps(TORCH_CONFIG),
            files=upload,
        )
    with httpclient.InferenceServerClient(code_uploads.http_url) as client:
        client.load_model("script", config=json.dumps(TORCH_CONFIG), files=upload)
        np.testing.assert_array_equal(_double(client, "script"), [3.0, -4.0])
        client.unload_model("script")


def test_pickle_named_model_onnx_is_refused(uploads: ServerProcess, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    upload = {"file:1/model.onnx": pickle.dumps(Touch(marker))}
    with httpclient.InferenceServerClient(uploads.http_url) as client:
        message = _refusal(client, "renamed", "403", config=ONNX_CONFIG, files=upload)
        assert "'1/model.onnx' is a pickle" in message
        assert "--allow-code-upload" in message
        # a real ONNX file under the same name still loads
        client.load_model(
            "renamed", config=ONNX_CONFIG, files={"file:1/model.onnx": add_sub_model()}
        )
        assert client.is_model_ready("renamed")
        client.unload_model("renamed")
    assert not marker.exists()


def test_symlinked_default_model_file_is_refused(locked: ServerProcess) -> None:
    with httpclient.InferenceServerClient(locked.http_url) as client:
        message = _refusal(client, "linked", "400")
        assert "default_model_filename 'model.onnx' resolves outside" in message
        assert not client.is_model_ready("linked")
        client.load_model("simple")  # the server and its other models are unaffected
        assert client.is_model_ready("simple")
