"""``logprobs`` through the ``openai`` SDK on the ``llm`` backend: a random tiny Llama (Hugging Face
files written here, the tokenizer and chat template in its version folder only) whose
configuration names only the backend, so that Triton's vLLM backend's tensors, with
``return_logprobs`` and ``logprobs``, are auto-completed.

The oracle is Hugging Face ``transformers``: greedy decoding of the same files, and the log
softmax of its logits at each step for the chosen token. ``usage`` is the model's own count
(``num_input_tokens``, ``num_output_tokens``, also auto-completed): the prompt as the model reads
it (the chat template applied, ``<s>`` added) and the tokens it generated."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

openai = pytest.importorskip("openai")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from inferd.testing import ServerProcess, running_server  # noqa: E402
from tests.helpers.tiny_llama import write_tiny_llama  # noqa: E402

pytestmark = pytest.mark.e2e

MODEL = "tiny"
PROMPT = "hello world, hello server"
TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}> {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
CONFIG = f"""
name: "{MODEL}"
backend: "llm"
parameters {{ key: "max_model_len" value {{ string_value: "96" }} }}
parameters {{ key: "kv_cache_blocks" value {{ string_value: "64" }} }}
parameters {{ key: "block_tokens" value {{ string_value: "8" }} }}
"""
TOKENS = 8


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("llm") / "models"
    version = write_tiny_llama(root / MODEL / "1", seed=5, max_positions=128)
    config = json.loads((version / "tokenizer_config.json").read_text())
    (version / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": TEMPLATE})
    )
    (root / MODEL / "config.pbtxt").write_text(CONFIG)
    return version


@pytest.fixture(scope="module")
def server(folder: Path) -> Iterator[ServerProcess]:
    with running_server([folder.parent.parent]) as proc:
        yield proc


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Any]:
    with openai.OpenAI(
        base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
    ) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def tokenizer(folder: Path) -> Any:
    return tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))


def _hf(folder: Path, ids: list[int], max_new: int) -> tuple[list[int], list[float]]:
    """Hugging Face's greedy tokens after ``ids`` and each one's log-probability."""
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.int64),
            do_sample=False,
            max_new_tokens=max_new,
            min_new_tokens=max_new,
            output_logits=True,
            return_dict_in_generate=True,
        )
    new = out.sequences[0, len(ids) :].tolist()
    logprobs = [
        float(logits[0].float().log_softmax(-1)[token])
        for logits, token in zip(out.logits, new, strict=True)
    ]
    return new, logprobs


def test_the_configuration_offers_logprobs(server: ServerProcess) -> None:
    config = httpx.get(f"http://{server.http_url}/v2/models/{MODEL}/config").json()
    assert "return_logprobs" in {t["name"] for t in config["input"]}
    assert {t["name"]: t["data_type"] for t in config["output"]}["logprobs"] == "TYPE_STRING"


def test_generate_answers_return_logprobs_as_vllms_backend(
    server: ServerProcess, folder: Path, tokenizer: Any
) -> None:
    ids = tokenizer.encode(PROMPT).ids
    expected_ids, expected = _hf(folder, ids, TOKENS)
    body = {
        "text_input": PROMPT,
        "sampling_parameters": json.dumps({"temperature": 0, "max_tokens": TOKENS, "logprobs": 0}),
        "exclude_input_in_output": True,
        "return_logprobs": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }
    reply = httpx.post(f"http://{server.http_url}/v2/models/{MODEL}/generate", json=body)
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    entries = json.loads(answer["logprobs"])
    assert [int(next(iter(e))) for e in entries] == expected_ids
    values = [next(iter(e.values())) for e in entries]
    assert [v["logprob"] for v in values] == pytest.approx(expected, abs=1e-3)
    assert "".join(v["decoded_token"] for v in values) == answer["text_output"]
    assert answer["num_input_tokens"] == len(ids)
    assert answer["num_output_tokens"] in (TOKENS, [TOKENS])
    streamed = httpx.post(
        f"http://{server.http_url}/v2/models/{MODEL}/generate_stream", json={**body, "stream": True}
    )
    events = [
        json.loads(line[len("data: ") :])
        for line in streamed.text.splitlines()
        if line.startswith("data: ")
    ]
    counts = [e["num_output_tokens"] for e in events]
    assert sum(c if isinstance(c, int) else sum(c) for c in counts) == TOKENS
    assert {e["num_input_tokens"] for e in events} == {len(ids)}
    without = httpx.post(
        f"http://{server.http_url}/v2/models/{MODEL}/generate",
        json={**body, "return_logprobs": False},
    ).json()
    assert "logprobs" not in without or not without["logprobs"]


def test_completion_logprobs_are_the_models(client: Any, folder: Path, tokenizer: Any) -> None:
    ids = tokenizer.encode(PROMPT).ids
    expected_ids, expected = _hf(folder, ids, TOKENS)
    reply = client.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=TOKENS,
        temperature=0,
        logprobs=0,
    )
    choice = reply.choices[0]
    assert choice.logprobs is not None
    # the model counts its tokens, so max_tokens is its own: the text is not cut at a re-count
    assert "".join(choice.logprobs.tokens) == choice.text == tokenizer.decode(expected_ids)
    kept = len(choice.logprobs.tokens)
    assert kept == TOKENS
    assert choice.finish_reason == "length"
    assert choice.logprobs.token_logprobs == pytest.approx(expected, abs=1e-3)
    assert reply.usage.prompt_tokens == len(ids)
    assert reply.usage.completion_tokens == TOKENS
    offsets = [sum(len(t) for t in choice.logprobs.tokens[:i]) for i in range(kept)]
    assert choice.logprobs.text_offset == offsets
    stream = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=TOKENS, temperature=0, logprobs=0, stream=True
    )
    streamed: list[str] = []
    values: list[float] = []
    text = ""
    for chunk in stream:
        for c in chunk.choices:
            text += c.text
            if c.logprobs is not None:
                streamed += c.logprobs.tokens
                values += c.logprobs.token_logprobs
    assert "".join(streamed) == text == choice.text
    assert values == pytest.approx(expected, abs=1e-3)


def test_chat_logprobs_and_usage(client: Any, folder: Path, tokenizer: Any) -> None:
    messages = [{"role": "user", "content": "hello server"}]
    rendered = "<user> hello server\n<assistant>"
    ids = tokenizer.encode(rendered).ids
    expected_ids, expected = _hf(folder, ids, TOKENS)
    reply = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=TOKENS, temperature=0, logprobs=True
    )
    content = reply.choices[0].logprobs.content
    text = reply.choices[0].message.content
    assert "".join(t.token for t in content) == text == tokenizer.decode(expected_ids)
    assert [t.logprob for t in content] == pytest.approx(expected, abs=1e-3)
    assert all(t.top_logprobs == [] and bytes(t.bytes) == t.token.encode() for t in content)
    assert reply.usage.prompt_tokens == len(ids)  # as the model reads it, <s> included
    assert reply.usage.completion_tokens == TOKENS  # the model's count, not a re-count
    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage.prompt_tokens == len(ids)
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens


def test_alternatives_are_refused_by_name(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt=PROMPT, logprobs=2)
    assert caught.value.param == "logprobs"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            logprobs=True,
            top_logprobs=3,
        )
    assert caught.value.param == "top_logprobs"
