"""The ``llm`` backend behind a real ``inferd serve``: a random tiny Llama (Hugging Face files
written here) in a model folder whose config.pbtxt names only the backend and its parameters
(the vLLM tensors and the decoupled policy are auto-completed), driven by the ``openai`` SDK
(``/v1/completions`` and ``/v1/chat/completions``, whole and streamed), Triton's HTTP
``generate`` / ``generate_stream`` and tritonclient's gRPC streaming with ``text_input``.

Greedy decoding makes every route give the same text for the same prompt; the routes are checked
against each other (the runtime's tokens are checked against Hugging Face in
tests/integration/test_llm_engine.py)."""

from __future__ import annotations

import json
import queue
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("torch")
pytest.importorskip("transformers")
grpcclient = pytest.importorskip("tritonclient.grpc")

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
parameters {{ key: "max_running" value {{ string_value: "4" }} }}
parameters {{ key: "kv_cache_blocks" value {{ string_value: "64" }} }}
parameters {{ key: "block_tokens" value {{ string_value: "8" }} }}
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("llm") / "models"
    folder = write_tiny_llama(root / MODEL / "1", seed=5, max_positions=128)
    (root / MODEL / "config.pbtxt").write_text(CONFIG)
    # the /v1 front end reads the tokenizer and chat template beside config.pbtxt
    shutil.copy(folder / "tokenizer.json", root / MODEL / "tokenizer.json")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (root / MODEL / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": TEMPLATE})
    )
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo], ["--openai-max-tokens=64"]) as proc:
        yield proc


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Any]:
    with openai.OpenAI(
        base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
    ) as sdk:
        yield sdk


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as c:
        yield c


def _generate(http: httpx.Client, prompt: str, max_tokens: int, **extra: Any) -> str:
    body = {
        "text_input": prompt,
        "sampling_parameters": json.dumps({"temperature": 0, "max_tokens": max_tokens}),
        "exclude_input_in_output": True,
        **extra,
    }
    reply = http.post(f"/v2/models/{MODEL}/generate", json=body)
    assert reply.status_code == 200, reply.text
    text: str = reply.json()["text_output"]
    return text


def _events(reply: httpx.Response) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in reply.text.splitlines()
        if line.startswith("data: ")
    ]


def test_the_configuration_is_auto_completed(http: httpx.Client) -> None:
    config = http.get(f"/v2/models/{MODEL}/config").json()
    assert config["backend"] == "llm"
    assert config["model_transaction_policy"]["decoupled"] is True
    inputs = {t["name"]: t for t in config["input"]}
    assert set(inputs) == {
        "text_input",
        "stream",
        "sampling_parameters",
        "exclude_input_in_output",
        "return_logprobs",
        "return_num_input_tokens",
        "return_num_output_tokens",
    }
    assert inputs["stream"]["optional"] is True
    outputs = [t["name"] for t in config["output"]]
    assert outputs == ["text_output", "logprobs", "num_input_tokens", "num_output_tokens"]


def test_generate_whole_and_streamed_agree(http: httpx.Client) -> None:
    whole = _generate(http, PROMPT, 10)
    assert whole
    with_prompt = _generate(http, PROMPT, 10, exclude_input_in_output=False)
    assert with_prompt == PROMPT + whole
    body = {
        "text_input": PROMPT,
        "stream": True,
        "sampling_parameters": json.dumps({"temperature": 0, "max_tokens": 10}),
    }
    reply = http.post(f"/v2/models/{MODEL}/generate_stream", json=body)
    assert reply.status_code == 200, reply.text
    events = _events(reply)
    assert len(events) > 1  # one event per text delta
    assert "".join(e["text_output"] for e in events) == whole


def test_openai_completions_whole_and_streamed(client: Any, http: httpx.Client) -> None:
    expected = _generate(http, PROMPT, 8)
    whole = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0)
    text = whole.choices[0].text
    assert text
    assert expected.startswith(text)  # /v1 may cut at its own count of max_tokens
    chunks = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, stream=True
    )
    streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    # the random model's text re-tokenizes to more tokens than it was generated as, so /v1's
    # own max_tokens count may cut whole and streamed answers at different points
    assert streamed
    assert expected.startswith(streamed)


def test_openai_chat_whole_and_streamed(client: Any, http: httpx.Client) -> None:
    messages = [{"role": "user", "content": "hello model"}]
    rendered = "<user> hello model\n<assistant>"
    expected = _generate(http, rendered, 8)
    whole = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=8, temperature=0
    )
    text = whole.choices[0].message.content
    assert text
    assert expected.startswith(text)
    chunks = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=8, temperature=0, stream=True
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed
    assert expected.startswith(streamed)


def test_tritonclient_grpc_stream_with_text_input(
    server: ServerProcess, http: httpx.Client
) -> None:
    # enough tokens that a slow first send (its text then joined with the next tokens') still
    # leaves more than one response
    expected = _generate(http, PROMPT, 64)
    inputs = []
    for name, value, dtype in (
        ("text_input", np.array([PROMPT.encode()], dtype=object), "BYTES"),
        ("stream", np.array([True]), "BOOL"),
        (
            "sampling_parameters",
            np.array([json.dumps({"temperature": 0, "max_tokens": 64}).encode()], dtype=object),
            "BYTES",
        ),
        ("exclude_input_in_output", np.array([True]), "BOOL"),
    ):
        tensor = grpcclient.InferInput(name, [1], dtype)
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as triton:
        triton.start_stream(callback=lambda result, error: results.put(error or result))
        try:
            triton.async_stream_infer(MODEL, inputs, enable_empty_final_response=True)
            pieces = []
            while True:
                item = results.get(timeout=60)
                assert not isinstance(item, Exception), item
                output = item.as_numpy("text_output")
                if output is not None:
                    pieces.append(output[0].decode())
                if item.get_response().parameters["triton_final_response"].bool_param:
                    break
        finally:
            triton.stop_stream()
    assert len(pieces) > 1
    assert "".join(pieces) == expected


def test_refusals_name_the_problem(http: httpx.Client, client: Any) -> None:
    body = {"text_input": PROMPT, "sampling_parameters": json.dumps({"bogus": 1})}
    reply = http.post(f"/v2/models/{MODEL}/generate", json=body)
    assert reply.status_code == 400
    assert "'bogus' is not a sampling parameter" in reply.json()["error"]
    body = {"text_input": "hello " * 120}
    reply = http.post(f"/v2/models/{MODEL}/generate", json=body)
    assert reply.status_code == 400
    assert "max_model_len" in reply.json()["error"]
    body = {"text_input": PROMPT, "sampling_parameters": json.dumps({"max_tokens": 500})}
    reply = http.post(f"/v2/models/{MODEL}/generate", json=body)
    assert reply.status_code == 400
    assert "max_tokens" in reply.json()["error"]
    # the model still serves
    assert _generate(http, PROMPT, 4)


def test_metrics_report_the_generation(server: ServerProcess, http: httpx.Client) -> None:
    assert _generate(http, PROMPT, 5)
    text = httpx.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    labels = f'model="{MODEL}",version="1"'
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("inferd_llm_")
    }
    assert values[f"inferd_llm_kv_cache_blocks{{{labels}}}"] == 64
    assert values[f"inferd_llm_kv_cache_blocks_used{{{labels}}}"] == 0
    assert values[f"inferd_llm_running_sequences{{{labels}}}"] == 0
    assert values[f"inferd_llm_generated_tokens_total{{{labels}}}"] >= 5
    finished = f'inferd_llm_requests_total{{model="{MODEL}",outcome="finished",version="1"}}'
    assert values[finished] >= 1
    assert values[f"inferd_llm_time_to_first_token_seconds_count{{{labels}}}"] >= 1
    assert values[f"inferd_llm_time_to_first_token_seconds_sum{{{labels}}}"] > 0


def _llm_values(server: ServerProcess) -> dict[str, float]:
    text = httpx.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("inferd_llm_")
    }


def test_a_client_that_leaves_mid_stream_frees_its_sequence(
    server: ServerProcess, http: httpx.Client
) -> None:
    labels = f'model="{MODEL}",version="1"'
    cancelled = f'inferd_llm_requests_total{{model="{MODEL}",outcome="cancelled",version="1"}}'
    before = _llm_values(server).get(cancelled, 0.0)
    body = {
        "text_input": PROMPT,
        "stream": True,
        "sampling_parameters": json.dumps({"max_tokens": 80, "ignore_eos": True}),
    }
    with http.stream("POST", f"/v2/models/{MODEL}/generate_stream", json=body) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: "):
                break  # one delta read; leaving closes the connection
    deadline = time.monotonic() + 30
    while True:
        values = _llm_values(server)
        if values.get(cancelled, 0.0) > before:
            break
        assert time.monotonic() < deadline, "the sequence was not cancelled"
        time.sleep(0.05)
    assert values[f"inferd_llm_running_sequences{{{labels}}}"] == 0
    assert values[f"inferd_llm_kv_cache_blocks_used{{{labels}}}"] == 0
    generated = values[f"inferd_llm_generated_tokens_total{{{labels}}}"]
    assert _generate(http, PROMPT, 3)  # still serving
    assert _llm_values(server)[f"inferd_llm_generated_tokens_total{{{labels}}}"] == generated + 3
