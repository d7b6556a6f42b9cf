"""``inferd serve --tokenizer PATH``: one folder's tokenizer and chat template for every text model,
so a model without files of its own (Triton's ``mock_llm``) serves chat and counts usage."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from inferd.testing import ServerProcess, running_server
from tests.e2e.test_openai_completions import build_repository, build_tokenizer

pytestmark = pytest.mark.e2e

TEMPLATE = "{% for m in messages %}{{ m.content }} {% endfor %}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo, _ = build_repository(
        tmp_path_factory.mktemp("openai-tokenizer"), tmp_path_factory.mktemp("markers")
    )
    shared = tmp_path_factory.mktemp("shared-tokenizer")
    build_tokenizer(shared)
    (shared / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    with running_server([repo], [f"--tokenizer={shared}"]) as proc:
        yield proc


def test_the_tokenizer_flag_serves_chat_on_a_model_without_files(server: ServerProcess) -> None:
    with openai.OpenAI(
        base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
    ) as sdk:
        reply = sdk.chat.completions.create(
            model="mock_llm",
            messages=[
                {"role": "user", "content": "one two"},
                {"role": "user", "content": "three"},
            ],
        )
        assert reply.choices[0].message.content == "one two three "  # mock_llm echoes its input
        assert reply.usage is not None
        assert reply.usage.prompt_tokens == 3
        # the flag's template serves every text model, echo_llm's own files notwithstanding
        echoed = sdk.chat.completions.create(
            model="echo_llm", messages=[{"role": "user", "content": "four"}]
        )
        assert echoed.choices[0].message.content == " four"
