"""Prefix reuse behind a real ``inferd serve``: two chat requests through the ``openai`` SDK with
one long system prompt and different questions; the second reuses the first's KV blocks, as the
metrics endpoint's hit counter shows, and answers as a model with the cache off does."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from inferd.testing import ServerProcess, running_server  # noqa: E402
from tests.helpers.tiny_llama import write_tiny_llama  # noqa: E402

pytestmark = pytest.mark.e2e

TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}> {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
SYSTEM = "You answer questions about the hello world server, briefly and politely. " * 4
CONFIG = """
name: "{name}"
backend: "llm"
parameters {{ key: "max_model_len" value {{ string_value: "256" }} }}
parameters {{ key: "kv_cache_blocks" value {{ string_value: "64" }} }}
parameters {{ key: "block_tokens" value {{ string_value: "8" }} }}
{extra}
"""
MODELS = {
    "tiny": "",
    "tiny_nocache": ('parameters { key: "enable_prefix_caching" value { string_value: "false" } }'),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("llm") / "models"
    weights = write_tiny_llama(tmp_path_factory.mktemp("hf") / "w", seed=5, max_positions=256)
    for name, extra in MODELS.items():
        version = root / name / "1"
        shutil.copytree(weights, version)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
        config = json.loads((weights / "tokenizer_config.json").read_text())
        (version / "tokenizer_config.json").write_text(
            json.dumps({**config, "chat_template": TEMPLATE})
        )
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo]) as proc:
        yield proc


def _counters(server: ServerProcess, model: str) -> tuple[float, float]:
    text = httpx.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    labels = f'{{model="{model}",version="1"}}'
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("inferd_llm_prefix_cache_")
    }
    return (
        values[f"inferd_llm_prefix_cache_hit_tokens_total{labels}"],
        values[f"inferd_llm_prefix_cache_queried_tokens_total{labels}"],
    )


def _ask(client: Any, model: str, question: str) -> tuple[str, int]:
    answer: Any = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        max_tokens=8,
        temperature=0,
    )
    return answer.choices[0].message.content, answer.usage.prompt_tokens


def test_a_shared_system_prompt_is_computed_once(server: ServerProcess) -> None:
    with openai.OpenAI(
        base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
    ) as client:
        answers = {
            model: [_ask(client, model, q) for q in ("what is it?", "hello, who are you?")]
            for model in MODELS
        }
    hit, queried = _counters(server, "tiny")
    (_, first_prompt), (_, second_prompt) = answers["tiny"]
    assert queried == first_prompt + second_prompt
    # the second request found the system prompt's full blocks (8 tokens each) cached
    assert hit >= 8 * ((len(SYSTEM.split()) // 2) // 8)
    assert hit < second_prompt
    assert hit % 8 == 0  # whole blocks only
    assert _counters(server, "tiny_nocache") == (0.0, 0.0)
    # the same greedy answers with the cache off
    assert [text for text, _ in answers["tiny"]] == [text for text, _ in answers["tiny_nocache"]]
