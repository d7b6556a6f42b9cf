"""Model control in explicit mode: index, load (with config and file overrides), unload."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.examples.build import MODEL_NAMES
from inferd.testing import ServerProcess, running_server
from tests.helpers.models import ADD_SUB_CONFIG, add_sub_model, write_add_sub

pytestmark = pytest.mark.e2e

# The configuration a `files` override must come with (Triton requires one), as JSON.
OVERRIDE_CONFIG = json.dumps(
    {
        "name": "simple",
        "platform": "onnxruntime_onnx",
        "max_batch_size": 4,
        "input": [
            {"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("INPUT0", "INPUT1")
        ],
        "output": [
            {"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")
        ],
    }
)
OFFSET = 1000  # the override model adds this to OUTPUT0


@pytest.fixture(scope="module")
def server(example_repo: Path) -> Iterator[ServerProcess]:
    args = ["--model-control-mode", "explicit", "--load-model", "simple", "--allow-model-upload"]
    with running_server([example_repo], args) as proc:
        yield proc


def _index_http(client: Any) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in client.get_model_repository_index()}


def _index_grpc(client: Any) -> dict[str, Any]:
    return {entry.name: entry for entry in client.get_model_repository_index().models}


def _infer(client: Any, module: Any, model: str = "simple") -> np.ndarray:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(a)
    return np.asarray(client.infer(model, inputs).as_numpy("OUTPUT0"))


def test_startup_loads_only_the_named_model(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        index = _index_http(client)
        assert sorted(index) == sorted(MODEL_NAMES)
        assert index["simple"] == {"name": "simple", "version": "1", "state": "READY"}
        assert index["digits"] == {"name": "digits"}  # never loaded: the name only
        assert client.is_model_ready("simple")
        assert not client.is_model_ready("digits")
        assert client.is_server_ready()  # readiness counts the models that should be loaded


def test_http_model_control(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        client.load_model("simple_int8")
        assert client.is_model_ready("simple_int8")
        assert _index_http(client)["simple_int8"]["state"] == "READY"

        # a partial override with a quoted integer, as Triton's own example sends it
        client.load_model("simple", config='{"max_batch_size":"16"}')
        config = client.get_model_config("simple")
        assert config["max_batch_size"] == 16
        assert config["input"][0]["dims"] == [16]  # the rest still comes from the model

        with pytest.raises(InferenceServerException) as caught:
            client.load_model("simple", config='"parameters": {"config": {{"max_batch_size"')
        assert "failed to load" in caught.value.message()
        assert client.is_model_ready("simple")  # a failed reload keeps the old version serving

        client.load_model(
            "simple",
            config=OVERRIDE_CONFIG,
            files={"file:1/model.onnx": add_sub_model(OFFSET)},
        )
        assert client.get_model_config("simple")["max_batch_size"] == 4
        np.testing.assert_array_equal(
            _infer(client, httpclient), 2 * np.arange(16).reshape(1, 16) + OFFSET
        )

        client.unload_model("simple")
        assert client.is_model_ready("simple") is False
        entry = _index_http(client)["simple"]
        assert entry["state"] == "UNAVAILABLE"
        assert entry["reason"] == "unloaded"
        with pytest.raises(InferenceServerException) as caught:
            _infer(client, httpclient)
        assert caught.value.message().startswith("Request for unknown model")

        with pytest.raises(InferenceServerException) as caught:
            client.load_model("no_such_model")
        assert "failed to load" in caught.value.message()
        assert caught.value.status() == "404"

        client.load_model("simple")  # back to the version on disk
        np.testing.assert_array_equal(_infer(client, httpclient), 2 * np.arange(16).reshape(1, 16))
        assert client.get_model_config("simple")["max_batch_size"] == 8


def test_grpc_model_control(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.load_model("digits")
        assert client.is_model_ready("digits")
        assert _index_grpc(client)["digits"].state == "READY"

        client.load_model("simple", config='{"max_batch_size":"16"}')
        assert client.get_model_config("simple").config.max_batch_size == 16

        client.load_model(
            "simple",
            config=OVERRIDE_CONFIG,
            files={"file:1/model.onnx": add_sub_model(OFFSET)},
        )
        np.testing.assert_array_equal(
            _infer(client, grpcclient), 2 * np.arange(16).reshape(1, 16) + OFFSET
        )

        client.unload_model("simple")
        assert client.is_model_ready("simple") is False
        assert _index_grpc(client)["simple"].reason == "unloaded"

        with pytest.raises(InferenceServerException) as caught:
            client.load_model("no_such_model")
        assert "failed to load" in caught.value.message()
        assert caught.value.status() == "StatusCode.NOT_FOUND"

        client.unload_model("digits")
        assert not client.is_model_ready("digits")
        client.load_model("simple")
        assert client.is_model_ready("simple")


def test_unloading_an_unknown_model_is_a_no_op(server: ServerProcess) -> None:
    """Triton answers success to an unload of a model it does not know (nothing to unload)."""
    with httpclient.InferenceServerClient(server.http_url) as client:
        client.unload_model("no_such_model")
        assert "no_such_model" not in _index_http(client)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.unload_model("no_such_model")
        client.unload_model("no_such_model", unload_dependents=True)
        assert client.is_model_ready("simple")


def test_specific_version_without_a_folder_is_skipped(tmp_path: Path) -> None:
    """``specific [1, 3]`` with folder 1 missing serves version 3 and logs the missing one, as
    Triton does; a policy none of whose versions has a folder still fails the model."""
    policy = "version_policy { specific { versions: [1, 3] } }\n"
    config = ADD_SUB_CONFIG + policy
    write_add_sub(tmp_path, "partial", (2, 3), config=config)
    write_add_sub(tmp_path, "none_left", (2,), config=config)
    with running_server([tmp_path], ["--exit-on-error=false"]) as proc:
        with grpcclient.InferenceServerClient(proc.grpc_url) as client:
            assert client.is_model_ready("partial", "3")
            assert not client.is_model_ready("partial", "1")
            assert not client.is_model_ready("partial", "2")
            assert client.get_model_metadata("partial").versions == ["3"]
            index = {(e.name, e.version): e for e in client.get_model_repository_index().models}
            assert not client.is_model_ready("none_left")
            reason = next(e.reason for (n, _), e in index.items() if n == "none_left")
            assert "at least one version must be available under the version policy" in reason
        log = proc.log_path.read_text()
    assert (
        "version 1 is specified for model 'partial', but the version directory is not present"
    ) in log


def test_a_repository_named_twice_is_served_once(example_repo: Path) -> None:
    """Triton keeps its repositories in a set: the same folder given twice is one repository."""
    args = ["--model-control-mode", "explicit", "--load-model", "simple"]
    with (
        running_server([example_repo, example_repo], args) as proc,
        httpclient.InferenceServerClient(proc.http_url) as client,
    ):
        assert client.is_model_ready("simple")
        assert _infer(client, httpclient).tolist() == [list(range(0, 32, 2))]
