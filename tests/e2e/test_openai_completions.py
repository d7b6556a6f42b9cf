"""The OpenAI-compatible API (``/v1``) against ``inferd serve``, driven by the official ``openai``
SDK (sync, async, streaming, errors) and raw HTTP for the error shapes and limits.

The repository is tests/data/triton_openai: Triton's own ``mock_llm`` (served unchanged) and
``echo_llm``, a decoupled model in the vLLM backend's shape that echoes its prompt's words; the
test gives echo_llm a tiny word-level tokenizer with a chat template, built here.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import raw_request

pytestmark = pytest.mark.e2e

DATA = Path(__file__).resolve().parent.parent / "data" / "triton_openai"
SENTENCES = ["one two three four five", "hello there general user assistant system"]
TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}{{ raise_exception('tool messages are not supported') }}{% endif %}"
    "<{{ m.role }}> {{ m.content }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
MAX_TOKENS, MAX_N, MAX_BODY = 64, 3, 4096


def build_tokenizer(folder: Path) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(SENTENCES, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"chat_template": TEMPLATE, "bos_token": "<s>", "eos_token": "</s>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return tokenizer


def build_repository(root: Path, markers: Path) -> tuple[Path, Tokenizer]:
    repo = root / "models"
    shutil.copytree(DATA, repo, ignore=shutil.ignore_patterns("ruff.toml", "__pycache__"))
    config = repo / "echo_llm" / "config.pbtxt"
    config.write_text(config.read_text().replace("MARKER_DIR", str(markers)))
    return repo, build_tokenizer(repo / "echo_llm")


@pytest.fixture(scope="module")
def markers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("markers")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, markers: Path) -> tuple[Path, Tokenizer]:
    return build_repository(tmp_path_factory.mktemp("openai"), markers)


@pytest.fixture(scope="module")
def server(repo: tuple[Path, Tokenizer]) -> Iterator[ServerProcess]:
    args = [
        "--openai-port=0",
        f"--openai-max-tokens={MAX_TOKENS}",
        f"--openai-max-n={MAX_N}",
        f"--openai-max-body-size={MAX_BODY}",
    ]
    with running_server([repo[0]], args) as proc:
        yield proc


@pytest.fixture(scope="module")
def tokenizer(repo: tuple[Path, Tokenizer]) -> Tokenizer:
    return repo[1]


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
    ) as sdk:
        yield sdk


def count(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


# -- models ---------------------------------------------------------------------------------------


def test_models_lists_every_text_model_with_owner_and_creation_time(
    client: openai.OpenAI,
) -> None:
    listed = {m.id: m for m in client.models.list()}
    assert set(listed) == {"echo_llm", "mock_llm"}
    for model in listed.values():
        assert model.owned_by == "inferd"
        assert model.object == "model"
        assert 0 < model.created <= time.time()
    assert client.models.retrieve("mock_llm").id == "mock_llm"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no_such_model")
    assert caught.value.code == "model_not_found"


# -- completions ----------------------------------------------------------------------------------


def test_completion_counts_usage_with_the_models_tokenizer(
    client: openai.OpenAI, tokenizer: Tokenizer
) -> None:
    reply = client.completions.create(model="echo_llm", prompt="one two three", user="u-1")
    assert reply.object == "text_completion"
    assert reply.id.startswith("cmpl-")
    assert [c.text for c in reply.choices] == [" one two three"]
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == count(tokenizer, "one two three") == 3
    assert reply.usage.completion_tokens == 3
    assert reply.usage.total_tokens == 6


def test_max_tokens_cuts_the_text_and_finishes_with_length(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="echo_llm", prompt="one two three four", max_tokens=2)
    assert reply.choices[0].text == " one two"
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 2


def test_max_tokens_cuts_a_stream_and_cancels_the_rest(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model="echo_llm", prompt="slow: forever", max_tokens=3, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == " tick tick tick"
    assert chunks[-1].choices[0].finish_reason == "length"


def test_stop_sequences_end_the_text_before_them(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model="echo_llm", prompt="one two three four", stop=["thr", "five"]
    )
    assert reply.choices[0].text == " one two "
    assert reply.choices[0].finish_reason == "stop"
    streamed = client.completions.create(
        model="echo_llm", prompt="one two three four", stop="three", stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == " one two "


def test_sampling_parameters_reach_the_model_as_vllm_takes_them(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model="echo_llm",
        prompt="params:",
        max_tokens=60,
        temperature=0.5,
        top_p=0.9,
        seed=7,
        presence_penalty=0.25,
        frequency_penalty=-0.5,
        stop=["xyz"],
    )
    assert json.loads(reply.choices[0].text) == {
        "max_tokens": 60,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 7,
        "presence_penalty": 0.25,
        "frequency_penalty": -0.5,
        "stop": ["zyx"],  # reversed by the model
    }


def test_n_runs_that_many_choices(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="echo_llm", prompt="one two", n=3)
    assert [(c.index, c.text) for c in reply.choices] == [(i, " one two") for i in range(3)]
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 6
    stream = client.completions.create(model="echo_llm", prompt="one two", n=2, stream=True)
    texts = ["", ""]
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts == [" one two", " one two"]


def test_streamed_completion_with_usage(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model="echo_llm",
        prompt="one two three",
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert texts == [" one", " two", " three", ""]  # one per response, then the finish
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (3, 3)


# -- chat -----------------------------------------------------------------------------------------

MESSAGES: list[Any] = [
    {"role": "system", "content": "general"},
    {"role": "user", "content": [{"type": "text", "text": "hello there"}]},
]
RENDERED = "<system> general\n<user> hello there\n<assistant>"


def test_chat_renders_the_models_template(client: openai.OpenAI, tokenizer: Tokenizer) -> None:
    reply = client.chat.completions.create(model="echo_llm", messages=MESSAGES)
    assert reply.object == "chat.completion"
    message = reply.choices[0].message
    assert message.role == "assistant"
    assert message.content == "".join(" " + w for w in RENDERED.split())
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == count(tokenizer, RENDERED)
    assert reply.usage.completion_tokens == count(tokenizer, message.content)


def test_chat_max_completion_tokens(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="echo_llm", messages=MESSAGES, max_completion_tokens=2
    )
    assert reply.choices[0].message.content == " <system"
    assert reply.choices[0].finish_reason == "length"


def test_async_streamed_chat(server: ServerProcess) -> None:
    async def run() -> list[Any]:
        async with openai.AsyncOpenAI(
            base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
        ) as sdk:
            stream = await sdk.chat.completions.create(
                model="echo_llm",
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},
            )
            return [chunk async for chunk in stream]

    chunks = asyncio.run(run())
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "".join(" " + w for w in RENDERED.split())
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0


def test_a_template_that_refuses_the_messages_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="echo_llm",
            messages=[{"role": "tool", "content": "x", "tool_call_id": "1"}],
        )
    assert "tool messages are not supported" in caught.value.message


# -- Triton's mock_llm, unchanged -----------------------------------------------------------------


def test_tritons_mock_llm_serves_completions(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="mock_llm", prompt="hello world")
    assert reply.choices[0].text == "hello world"  # it answers with its input
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is None  # no tokenizer: nothing to count with
    stream = client.completions.create(model="mock_llm", prompt="hello world", stream=True)
    assert "".join(c.choices[0].text for c in stream) == "hello world"


def test_mock_llm_refuses_what_it_cannot_honour(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="mock_llm", prompt="x", temperature=0.2)
    assert caught.value.param == "temperature"
    assert "sampling_parameters" in caught.value.message
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="mock_llm", messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.code == "chat_template_missing"
    assert "--tokenizer" in caught.value.message
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="mock_llm", prompt="x", max_tokens=4)
    assert caught.value.param == "max_tokens"


# -- errors and limits ----------------------------------------------------------------------------


def test_sdk_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        client.completions.create(model="nope", prompt="x")
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as too_many:
        client.completions.create(model="echo_llm", prompt="x", max_tokens=MAX_TOKENS + 1)
    assert too_many.value.param == "max_tokens"
    assert "--openai-max-tokens" in too_many.value.message
    with pytest.raises(openai.BadRequestError) as too_many_n:
        client.completions.create(model="echo_llm", prompt="x", n=MAX_N + 1)
    assert too_many_n.value.param == "n"
    with pytest.raises(openai.BadRequestError) as logprobs:
        client.completions.create(model="echo_llm", prompt="x", logprobs=2)
    assert logprobs.value.param == "logprobs"
    with pytest.raises(openai.BadRequestError) as unknown:
        client.completions.create(model="echo_llm", prompt="x", extra_body={"typo": 1})
    assert unknown.value.param == "typo"


def _error(reply: Any) -> dict[str, Any]:
    body = reply.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


def test_raw_error_shapes_and_body_limit(server: ServerProcess) -> None:
    url = server.http_url
    big = json.dumps({"model": "echo_llm", "prompt": "x" * MAX_BODY}).encode()
    error = _error(raw_request(url, "POST", "/v1/completions", big))
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "request_too_large"
    assert f"{MAX_BODY} bytes" in error["message"]
    assert "--openai-max-body-size" in error["message"]
    reply = raw_request(url, "POST", "/v1/completions", b"{not json")
    assert reply.status == 400
    assert "not valid JSON" in _error(reply)["message"]
    reply = raw_request(url, "POST", "/v1/completions", b'{"model": "echo_llm"}')
    assert reply.status == 400
    assert _error(reply)["param"] == "prompt"
    reply = raw_request(url, "GET", "/v1/completions")
    assert reply.status == 405
    assert "POST" in _error(reply)["message"]
    reply = raw_request(url, "GET", "/v1/nothing")
    assert reply.status == 404
    assert _error(reply)["type"] == "not_found_error"
    big_n = json.dumps({"model": "echo_llm", "prompt": "x", "n": MAX_N + 1}).encode()
    reply = raw_request(url, "POST", "/v1/completions", big_n)
    assert reply.status == 400
    assert _error(reply)["code"] == "n_limit_exceeded"
    assert raw_request(url, "GET", "/v2/models/echo_llm/ready").status == 200  # v2 unchanged


def test_openai_port_serves_v1_alone(server: ServerProcess) -> None:
    url = f"127.0.0.1:{server.ports['openai']}"
    reply = raw_request(url, "GET", "/v1/models")
    assert reply.status == 200
    assert {m["id"] for m in reply.json()["data"]} == {"echo_llm", "mock_llm"}
    reply = raw_request(url, "GET", "/v2/health/ready")
    assert reply.status == 404
    assert _error(reply)["type"] == "not_found_error"
    with openai.OpenAI(base_url=f"http://{url}/v1", api_key="unused", max_retries=0) as sdk:
        answer = sdk.completions.create(model="echo_llm", prompt="one")
    assert answer.choices[0].text == " one"


def _wait_for(folder: Path, seen: set[str], timeout_s: float = 20.0) -> Path:
    deadline = time.monotonic() + timeout_s
    while True:
        fresh = [p for p in folder.iterdir() if p.name not in seen]
        if fresh:
            return fresh[0]
        assert time.monotonic() < deadline, "no marker appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_disconnects_cancels_the_models_stream(
    server: ServerProcess, markers: Path, stream: bool
) -> None:
    seen = {p.name for p in markers.iterdir()}
    body = json.dumps({"model": "echo_llm", "prompt": "slow: on", "stream": stream}).encode()
    host, port = server.http_url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        started = _wait_for(markers, seen)
        assert started.name.endswith(".started")
        seen.add(started.name)
        if stream:
            assert b"data: " in sock.recv(65536)  # the first chunk arrived
    marker = markers / started.name.removesuffix(".started")
    deadline = time.monotonic() + 20
    while not marker.exists():  # the model saw the cancellation and stopped
        assert time.monotonic() < deadline, "the model never saw the request cancelled"
        time.sleep(0.05)
    assert int(marker.read_text()) > 0


# -- statistics -----------------------------------------------------------------------------------


def _success_and_failures(server: ServerProcess) -> tuple[int, int]:
    reply = raw_request(server.http_url, "GET", "/v2/models/echo_llm/stats")
    assert reply.status == 200, reply.body
    stats = reply.json()["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"]), int(stats["fail"]["count"])


def test_every_answered_request_counts_as_a_success(server: ServerProcess) -> None:
    """A client that stops reading at the final response has read all of it: the request is a
    success in the statistics extension, not a cancellation."""
    before_ok, before_failed = _success_and_failures(server)
    with openai.OpenAI(
        base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
    ) as sdk:
        for _ in range(12):
            sdk.completions.create(model="echo_llm", prompt="one two three")
        for _ in range(4):
            list(sdk.completions.create(model="echo_llm", prompt="one two", stream=True))
    deadline = time.monotonic() + 10  # the count is taken as each execute ends, after its answer
    while True:
        ok, failed = _success_and_failures(server)
        if ok - before_ok >= 16 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert (ok - before_ok, failed - before_failed) == (16, 0)
