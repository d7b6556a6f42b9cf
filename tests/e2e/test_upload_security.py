"""Model control from the network cannot reach outside the repository, and uploads are opt-in.

A real ``inferd serve --model-control-mode explicit`` driven by tritonclient (HTTP and gRPC)
and by raw HTTP for percent-encoded names.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import raw_request
from tests.helpers.models import ADD_SUB_CONFIG_JSON, add_sub_model, write_add_sub

pytestmark = pytest.mark.e2e

CONFIG = ADD_SUB_CONFIG_JSON


@pytest.fixture(scope="module")
def canary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory outside the repository that no request may write into or delete."""
    path = tmp_path_factory.mktemp("canary") / "victim"
    (path / "sub").mkdir(parents=True)
    (path / "sub" / "keep").write_text("still here")
    return path


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    write_add_sub(root, "simple")
    return root


@pytest.fixture(scope="module")
def locked(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo], ["--model-control-mode", "explicit"]) as proc:
        yield proc


@pytest.fixture(scope="module")
def open_uploads(repo: Path) -> Iterator[ServerProcess]:
    args = ["--model-control-mode", "explicit", "--allow-model-upload"]
    with running_server([repo], args) as proc:
        yield proc


def _canary_intact(canary: Path) -> None:
    assert sorted(p.relative_to(canary).as_posix() for p in canary.rglob("*")) == [
        "sub",
        "sub/keep",
    ]
    assert (canary / "sub" / "keep").read_text() == "still here"


def _load_body(files: dict[str, bytes]) -> bytes:
    params: dict[str, str] = {"config": CONFIG}
    params.update({f"file:{k}": base64.b64encode(v).decode() for k, v in files.items()})
    return json.dumps({"parameters": params}).encode()


@pytest.mark.parametrize("action", ["load", "unload"])
def test_path_names_are_refused_over_http(
    open_uploads: ServerProcess, canary: Path, action: str
) -> None:
    target = canary / "sub"
    files = {"1/model.onnx": add_sub_model(), "1/planted": b"x"}
    for name in (str(target), f"../../../../../../..{target}", "..", "a/b", "a\\b"):
        path = f"/v2/repository/models/{quote(name, safe='')}/{action}"
        body = _load_body(files) if action == "load" else b"{}"
        reply = raw_request(open_uploads.http_url, "POST", path, body)
        assert reply.status == 400, (name, reply.status, reply.body)
        _canary_intact(canary)
    assert raw_request(open_uploads.http_url, "GET", "/v2/health/live").status == 200


def test_path_names_are_refused_over_grpc(open_uploads: ServerProcess, canary: Path) -> None:
    files = {"file:1/model.onnx": add_sub_model()}
    with grpcclient.InferenceServerClient(open_uploads.grpc_url) as client:
        for name in (str(canary), str(canary / "sub"), "../victim", ".."):
            with pytest.raises(InferenceServerException) as caught:
                client.load_model(name, config=CONFIG, files=files)
            assert caught.value.status() == "StatusCode.INVALID_ARGUMENT", name
            with pytest.raises(InferenceServerException) as caught:
                client.unload_model(name)
            assert caught.value.status() == "StatusCode.INVALID_ARGUMENT", name
            _canary_intact(canary)


def test_bad_file_keys_are_refused(open_uploads: ServerProcess, canary: Path) -> None:
    with httpclient.InferenceServerClient(open_uploads.http_url) as client:
        for key in (f"file:{canary}/planted", "file:../../planted", "file:1/../../x", "file:"):
            with pytest.raises(InferenceServerException) as caught:
                client.load_model("uploaded", config=CONFIG, files={key: b"x"})
            assert caught.value.status() == "400", key
            _canary_intact(canary)


def test_uploads_are_refused_without_the_flag(locked: ServerProcess) -> None:
    files = {"file:1/model.onnx": add_sub_model()}
    with httpclient.InferenceServerClient(locked.http_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("uploaded", config=CONFIG, files=files)
        assert caught.value.status() == "403"
        assert "--allow-model-upload" in caught.value.message()
        assert not client.is_model_ready("uploaded")
    with grpcclient.InferenceServerClient(locked.grpc_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("uploaded", config=CONFIG, files=files)
        assert caught.value.status() == "StatusCode.PERMISSION_DENIED"


def test_onnx_upload_with_the_flag_and_code_refused(open_uploads: ServerProcess) -> None:
    with httpclient.InferenceServerClient(open_uploads.http_url) as client:
        client.load_model("uploaded", config=CONFIG, files={"file:1/model.onnx": add_sub_model(7)})
        assert client.is_model_ready("uploaded")
        with pytest.raises(InferenceServerException) as caught:
            client.load_model(
                "pycode",
                config=json.dumps({"backend": "python", "max_batch_size": 0}),
                files={"file:1/model.py": b"raise SystemExit('ran')\n"},
            )
        assert caught.value.status() == "403"
        assert "--allow-code-upload" in caught.value.message()
        client.unload_model("uploaded")
    with grpcclient.InferenceServerClient(open_uploads.grpc_url) as client:
        client.load_model("uploaded", config=CONFIG, files={"file:1/model.onnx": add_sub_model()})
        assert client.is_model_ready("uploaded")
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("pycode", config="{}", files={"file:1/model.py": b"pass\n"})
        assert caught.value.status() == "StatusCode.PERMISSION_DENIED"


def test_unknown_model_load_is_a_client_error(locked: ServerProcess) -> None:
    with httpclient.InferenceServerClient(locked.http_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("no_such_model")
        assert caught.value.status() == "404"
        assert "failed to load 'no_such_model'" in caught.value.message()
    with grpcclient.InferenceServerClient(locked.grpc_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("no_such_model")
        assert caught.value.status() == "StatusCode.NOT_FOUND"
        assert "failed to load 'no_such_model'" in caught.value.message()


def test_oversized_file_key_answers_as_triton(locked: ServerProcess) -> None:
    """tritonclient's model-control example: a 256-byte file name is INTERNAL, "failed to poll
    from model repository", and the server stays up (even with uploads disabled)."""
    with grpcclient.InferenceServerClient(locked.grpc_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("simple", config="{}", files={"file:" + "A" * 256: b"a"})
        assert caught.value.status() == "StatusCode.INTERNAL"
        assert "failed to poll from model repository" in caught.value.message()
        assert client.is_server_live()
