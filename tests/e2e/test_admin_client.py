"""``inferd.client.AdminClient`` against a real ``inferd serve`` with an admin token: the model
repository calls work with the token, and every failure maps to one error of the tree with the
server's message (401 without the token, the server's own words for a bad call), with
``tritonclient`` as the oracle of what the server holds."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import tritonclient.http as httpclient

from inferd.client import AdminClient, Endpoint
from inferd.errors import (
    AccessDeniedError,
    ErrorCode,
    RepositoryCallError,
    ServerUnauthenticatedError,
)
from inferd.testing import ServerProcess, running_server
from tests.helpers.models import ADD_SUB_CONFIG, write_add_sub
from tests.helpers.rollout_models import ALL_VERSIONS

pytestmark = pytest.mark.e2e

TOKEN = "admin-client-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("admin_client")
    write_add_sub(root / "models", "addsub", (1, 2), config=ADD_SUB_CONFIG + ALL_VERSIONS)
    (root / "token").write_text(TOKEN)
    args = ["--model-control-mode", "explicit", "--load-model", "addsub",
            "--admin-token-file", str(root / "token")]  # fmt: skip
    with running_server([root / "models"], args) as proc:
        yield proc


def _client(server: ServerProcess, token: str | None = TOKEN) -> AdminClient:
    return AdminClient(Endpoint.from_url(server.http_url, token=token), timeout_s=60.0)


def test_index_config_unload_and_load(server: ServerProcess) -> None:
    client = _client(server)
    oracle = httpclient.InferenceServerClient(server.http_url)
    try:
        assert {row["name"] for row in client.index()} == {"addsub"}
        config = client.config("addsub")
        assert config == oracle.get_model_config("addsub")
        client.unload("addsub")
        assert not oracle.is_model_ready("addsub")
        client.load("addsub", json.dumps({**config, "max_batch_size": 4}))
        assert oracle.is_model_ready("addsub")
        assert oracle.get_model_config("addsub")["max_batch_size"] == 4
        client.load("addsub")
        assert oracle.get_model_config("addsub")["max_batch_size"] == config["max_batch_size"]
    finally:
        oracle.close()


def test_without_the_token_a_401_names_what_to_pass(server: ServerProcess) -> None:
    with pytest.raises(ServerUnauthenticatedError) as caught:
        _client(server, token=None).unload("addsub")
    assert isinstance(caught.value, AccessDeniedError)
    assert caught.value.code is ErrorCode.UNAUTHENTICATED
    assert caught.value.message.startswith("the server refused model control (HTTP 401: ")
    assert caught.value.message.endswith("--admin-token-file FILE (or the INFERD_ADMIN_TOKEN "
                                         "environment variable)")  # fmt: skip
    with pytest.raises(ServerUnauthenticatedError):
        _client(server, token="wrong").rollback("addsub")


def test_a_bad_call_raises_the_servers_message(server: ServerProcess) -> None:
    client = _client(server)
    with pytest.raises(RepositoryCallError) as caught:
        client.load("no_such_model")
    assert "no_such_model" in caught.value.message
    with pytest.raises(RepositoryCallError) as rolled:
        client.rollback("addsub", 7)
    assert "7" in rolled.value.message
