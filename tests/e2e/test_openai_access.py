"""``/v1`` is its own API group (``openai``) for ``--http-restricted-api``, on the HTTP port and on
``--openai-port`` alike; restricting it leaves the v2 API open, and restricting v2's
``inference`` group leaves ``/v1`` open."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import raw_request
from tests.e2e.test_openai_completions import build_repository

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo, _ = build_repository(
        tmp_path_factory.mktemp("openai-access"), tmp_path_factory.mktemp("markers")
    )
    args = ["--openai-port=0", "--http-restricted-api=openai:X-OpenAI-Key=s3cret"]
    with running_server([repo], args) as proc:
        yield proc


@pytest.fixture(scope="module")
def v2_restricted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("v2-restricted")
    models, _ = build_repository(repo, tmp_path_factory.mktemp("markers"))
    with running_server([models], ["--http-restricted-api=inference:k=v"]) as proc:
        yield proc


def _ports(server: ServerProcess) -> list[str]:
    return [server.http_url, f"127.0.0.1:{server.ports['openai']}"]


def test_a_restricted_v1_needs_the_header_on_both_ports(server: ServerProcess) -> None:
    for url in _ports(server):
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/completions")):
            reply = raw_request(url, method, path, b"{}")
            assert reply.status == 403, (url, path)
            error = reply.json()["error"]
            assert error["type"] == "permission_error"
            assert "X-OpenAI-Key" in error["message"]
        wrong = raw_request(url, "GET", "/v1/models", headers={"X-OpenAI-Key": "nope"})
        assert wrong.status == 403
        with openai.OpenAI(
            base_url=f"http://{url}/v1",
            api_key="unused",
            max_retries=0,
            default_headers={"X-OpenAI-Key": "s3cret"},
        ) as sdk:
            assert sdk.completions.create(model="echo_llm", prompt="one").choices[0].text == " one"
        with (
            openai.OpenAI(base_url=f"http://{url}/v1", api_key="k", max_retries=0) as sdk,
            pytest.raises(openai.PermissionDeniedError),
        ):
            sdk.models.list()


def test_restricting_v1_leaves_v2_open(server: ServerProcess) -> None:
    assert raw_request(server.http_url, "GET", "/v2/health/ready").status == 200
    assert raw_request(server.http_url, "GET", "/v2/models/echo_llm").status == 200


def test_restricting_v2_inference_leaves_v1_open(v2_restricted: ServerProcess) -> None:
    url = v2_restricted.http_url
    assert raw_request(url, "POST", "/v2/models/echo_llm/generate", b"{}").status == 403
    reply = raw_request(url, "GET", "/v1/models")
    assert reply.status == 200
    assert {m["id"] for m in reply.json()["data"]} == {"echo_llm", "mock_llm"}


def test_the_repository_folder_is_the_only_place_tokenizers_come_from(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A model id that looks like a path is refused before any file is looked at."""
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "pwned"}')
    for model in (str(tmp_path), "../" + tmp_path.name, "echo_llm/../mock_llm"):
        reply = raw_request(
            server.http_url,
            "POST",
            "/v1/chat/completions",
            ('{"model": "' + model + '", "messages": [{"role": "user", "content": "x"}]}').encode(),
            headers={"X-OpenAI-Key": "s3cret"},
        )
        assert reply.status in (400, 404), model
        assert "pwned" not in reply.body.decode()
