"""What each endpoint does for a model that is not loaded in on-demand mode, on a real
``inferd serve --model-control-mode on-demand``: readiness answers false and loads nothing;
metadata, config, generate and every ``/v1`` call load the model first, as inference does.

Each test asks about its own models, so none finds a model that another test loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, running_server
from tests.e2e.test_openai_completions import build_repository
from tests.helpers.embeddings import MODEL as EMBEDDING_MODEL
from tests.helpers.models import write_add_sub

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.e2e

SIMPLE = ("ready", "meta_http", "meta_grpc", "config_http", "config_grpc", "gen")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, embedding_repo: Path
) -> Iterator[ServerProcess]:
    repo, _ = build_repository(
        tmp_path_factory.mktemp("on_demand_endpoints"), tmp_path_factory.mktemp("markers")
    )
    for name in SIMPLE:
        write_add_sub(repo, name)
    args = ["--model-control-mode", "on-demand", "--exit-on-error", "false"]
    with running_server([repo, embedding_repo], args) as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120) as client:
        yield client


@pytest.fixture
def sdk(server: ServerProcess) -> Iterator[object]:
    with openai.OpenAI(
        base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0, timeout=120
    ) as client:
        yield client


def _resident(http: httpclient.InferenceServerClient, name: str) -> bool:
    entry = next(e for e in http.get_model_repository_index() if e["name"] == name)
    return bool(entry.get("on_demand") == "resident")


# -- v2 -------------------------------------------------------------------------------------------


def test_readiness_of_a_model_not_loaded_is_false_and_loads_nothing(
    server: ServerProcess, http: httpclient.InferenceServerClient
) -> None:
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    for _ in range(2):
        assert http.is_model_ready("ready") is False
        assert grpc.is_model_ready("ready") is False
    assert not _resident(http, "ready")
    x = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    x.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    y = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    y.set_data_from_numpy(np.ones((1, 16), np.int32))
    http.infer("ready", [x, y])  # inference loads it: now it is ready
    assert http.is_model_ready("ready") is True
    assert _resident(http, "ready")
    assert grpc.is_model_ready("ready") is True


def test_metadata_loads_the_model_over_http_and_grpc(
    server: ServerProcess, http: httpclient.InferenceServerClient
) -> None:
    meta = http.get_model_metadata("meta_http")
    assert meta["name"] == "meta_http"
    assert [i["name"] for i in meta["inputs"]] == ["INPUT0", "INPUT1"]
    assert http.is_model_ready("meta_http")
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert grpc.get_model_metadata("meta_grpc").name == "meta_grpc"
    assert grpc.is_model_ready("meta_grpc")


def test_config_loads_the_model_over_http_and_grpc(
    server: ServerProcess, http: httpclient.InferenceServerClient
) -> None:
    assert http.get_model_config("config_http")["max_batch_size"] == 8
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert grpc.get_model_config("config_grpc").config.max_batch_size == 8
    assert http.is_model_ready("config_http")
    assert http.is_model_ready("config_grpc")


def test_metadata_of_an_unknown_model_is_still_a_404(
    http: httpclient.InferenceServerClient,
) -> None:
    with pytest.raises(Exception, match="Request for unknown model: 'nowhere'"):
        http.get_model_metadata("nowhere")


def test_generate_loads_the_model(server: ServerProcess) -> None:
    body = {"INPUT0": list(range(16)), "INPUT1": [1] * 16}
    reply = httpx.post(f"http://{server.http_url}/v2/models/gen/generate", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    assert reply.json()["OUTPUT0"] == list(range(1, 17))


# -- /v1 ------------------------------------------------------------------------------------------


def test_v1_chat_completion_loads_the_text_model(
    sdk: object, http: httpclient.InferenceServerClient
) -> None:
    assert not _resident(http, "echo_llm")
    answer = sdk.chat.completions.create(  # type: ignore[attr-defined]
        model="echo_llm", messages=[{"role": "user", "content": "one two"}], max_tokens=8
    )
    assert "one two" in answer.choices[0].message.content
    assert http.is_model_ready("echo_llm")


def test_v1_retrieve_loads_the_model_and_an_unknown_one_is_model_not_found(
    sdk: object, http: httpclient.InferenceServerClient
) -> None:
    assert sdk.models.retrieve("mock_llm").id == "mock_llm"  # type: ignore[attr-defined]
    assert http.is_model_ready("mock_llm")
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.models.retrieve("nowhere")  # type: ignore[attr-defined]
    assert caught.value.body["code"] == "model_not_found"


def test_v1_embeddings_loads_the_embedding_model(
    server: ServerProcess, sdk: object, http: httpclient.InferenceServerClient
) -> None:
    answer = sdk.embeddings.create(model=EMBEDDING_MODEL, input=["Short."])  # type: ignore[attr-defined]
    assert len(answer.data) == 1
    assert len(answer.data[0].embedding) > 0
    assert http.is_model_ready(EMBEDDING_MODEL)
    # a completion naming no model of the repository: OpenAI's 404, nothing loads
    reply = httpx.post(
        f"http://{server.http_url}/v1/completions",
        content=json.dumps({"model": "nowhere", "prompt": "x"}),
        timeout=30,
    )
    assert reply.status_code == 404, reply.text
    assert reply.json()["error"]["code"] == "model_not_found"
