"""The example language model ``tiny_llm`` served by ``inferd serve`` on the ``llm`` backend: its
greedy text equals Hugging Face ``generate(do_sample=False)`` of the same files, and chat through
the ``openai`` SDK answers with the model's chat template.

Float-noise ties: both sides compute in float32, so the texts are compared up to the first step
where Hugging Face's top-2 logit gap is under 1e-3 (the trained model's gaps are far larger; the
test checks most tokens were compared)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferd.testing import ServerProcess, running_server

openai = pytest.importorskip("openai")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

MODEL = "tiny_llm"
TIE_GAP = 1e-3


@pytest.fixture(scope="module")
def server(tiny_llm_repo: Path) -> Iterator[ServerProcess]:
    # /v1 reads the tokenizer and chat template from the model's version folder
    with running_server([tiny_llm_repo]) as proc:
        yield proc


def _hf_greedy(folder: Path, prompt: str, max_new: int) -> tuple[str, int, int]:
    """HF's greedy text for ``prompt`` cut before the first near-tie; (text, tokens kept, made)."""
    tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = tokenizer.encode(prompt).ids
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.int64),
            do_sample=False,
            max_new_tokens=max_new,
            output_scores=True,
            return_dict_in_generate=True,
        )
    new = out.sequences[0, len(ids) :].tolist()
    keep = len(new)
    for i, scores in enumerate(out.scores):
        top = scores[0].topk(2).values
        if float(top[0] - top[1]) < TIE_GAP:
            keep = i  # tokens before the tie are certain; the tied one may differ
            break
    return tokenizer.decode(new[:keep], skip_special_tokens=True), keep, len(new)


def test_greedy_text_equals_hugging_face(server: ServerProcess, tiny_llm_repo: Path) -> None:
    prompt = "The server"
    body = {
        "text_input": prompt,
        "sampling_parameters": json.dumps({"temperature": 0, "max_tokens": 24}),
        "exclude_input_in_output": True,
    }
    reply = httpx.post(
        f"http://{server.http_url}/v2/models/{MODEL}/generate", json=body, timeout=60
    )
    assert reply.status_code == 200, reply.text
    ours = reply.json()["text_output"]
    want, kept, made = _hf_greedy(tiny_llm_repo / MODEL / "1", prompt, 24)
    assert kept >= made * 0.75, "too many near-ties to compare"
    assert ours.startswith(want)
    assert len(want.split()) >= 3  # real words were compared


def test_chat_through_the_openai_sdk(server: ServerProcess, tiny_llm_repo: Path) -> None:
    with openai.OpenAI(
        base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
    ) as client:
        answer: Any = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "What does the server do?"}],
            max_tokens=40,
            temperature=0,
        )
        chunks = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "What does the server do?"}],
            max_tokens=40,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        received = list(chunks)
        streamed = "".join(c.choices[0].delta.content or "" for c in received if c.choices)
    text = answer.choices[0].message.content
    assert text.strip()
    assert "<|end|>" not in text  # the end token finishes the answer, unseen
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert streamed == text
    # usage: the prompt as the runtime reads it (the chat template applied, <s> added)
    folder = tiny_llm_repo / MODEL / "1"
    tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    template = json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]
    assert "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}" in template
    rendered = "<|user|>\nWhat does the server do?<|end|>\n<|assistant|>\n"
    prompt_tokens = len(tokenizer.encode(rendered).ids)
    completion_tokens = len(tokenizer.encode(text, add_special_tokens=False).ids)
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (
        prompt_tokens,
        completion_tokens,
    )
    assert received[-1].choices == []
    assert received[-1].usage.prompt_tokens == prompt_tokens
    assert received[-1].usage.completion_tokens == completion_tokens


def test_chat_logprobs_through_the_openai_sdk(server: ServerProcess) -> None:
    import math

    with openai.OpenAI(
        base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
    ) as client:
        answer: Any = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "What does the server do?"}],
            max_tokens=12,
            temperature=0,
            logprobs=True,
        )
    choice = answer.choices[0]
    tokens = choice.logprobs.content
    assert tokens, "no log-probabilities in the answer"
    for token in tokens:
        assert math.isfinite(token.logprob)
        assert token.logprob <= 0.0
    # the tokens' texts make up the answer (the end token adds none)
    assert "".join(t.token for t in tokens) == choice.message.content
    # greedy: the chosen tokens are likely ones (a random pick would be near -log(vocab))
    assert max(t.logprob for t in tokens) > -1.0
