"""``/v1`` finishing touches against ``inferd serve`` through the ``openai`` SDK: a completion's
prompt as a list of strings or as token ids (one choice per prompt and ``n``, in OpenAI's order),
the tokenizer and chat template read from the model's version folder (as Hugging Face folders
hold them) and confined to the model's folder, and ``created`` in ``/v1/models`` from the time
the model was loaded.

The repository is tests/data/triton_openai (``echo_llm`` echoes its prompt's words); here
echo_llm's tokenizer files lie in its version folder ``1/`` only.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import tritonclient.http as httpclient
from tokenizers import Tokenizer

from inferd.testing import ServerProcess, running_server
from tests.e2e.test_openai_completions import build_repository

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Tokenizer]:
    root, tokenizer = build_repository(
        tmp_path_factory.mktemp("prompts"), tmp_path_factory.mktemp("markers")
    )
    model = root / "echo_llm"
    for name in ("tokenizer.json", "tokenizer_config.json"):  # into the version folder
        (model / name).rename(model / "1" / name)
    # a copy whose version folder's tokenizer_config.json is a link out of the model folder
    linked = root / "echo_linked"
    shutil.copytree(model, linked)
    outside = tmp_path_factory.mktemp("outside") / "tokenizer_config.json"
    (linked / "1" / "tokenizer_config.json").rename(outside)
    (linked / "1" / "tokenizer_config.json").symlink_to(outside)
    return root, tokenizer


@pytest.fixture(scope="module")
def server(repo: tuple[Path, Tokenizer]) -> Iterator[ServerProcess]:
    args = [
        "--model-control-mode=explicit",
        "--load-model=echo_llm",
        "--load-model=echo_linked",
        "--load-model=mock_llm",
        "--openai-max-n=4",
    ]
    with running_server([repo[0]], args) as proc:
        yield proc


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
    ) as sdk:
        yield sdk


def test_a_list_of_prompts_gives_n_choices_each_in_openais_order(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="echo_llm", prompt=["one two", "three"], n=2)
    assert [(c.index, c.text) for c in reply.choices] == [
        (0, " one two"),
        (1, " one two"),
        (2, " three"),
        (3, " three"),
    ]
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (3, 6)
    texts = [""] * 4
    stream = client.completions.create(
        model="echo_llm", prompt=["one two", "three"], n=2, stream=True
    )
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts == [" one two", " one two", " three", " three"]
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="echo_llm", prompt=["a", "b", "c"], n=2)
    assert caught.value.param == "prompt"
    assert "--openai-max-n" in caught.value.message


def test_token_id_prompts_are_decoded_with_the_models_tokenizer(
    client: openai.OpenAI, repo: tuple[Path, Tokenizer]
) -> None:
    tokenizer = repo[1]
    ids = tokenizer.encode("one two three", add_special_tokens=False).ids
    reply = client.completions.create(model="echo_llm", prompt=ids)
    assert [c.text for c in reply.choices] == [" one two three"]
    more = tokenizer.encode("four five", add_special_tokens=False).ids
    reply = client.completions.create(model="echo_llm", prompt=[ids, more])
    assert [(c.index, c.text) for c in reply.choices] == [(0, " one two three"), (1, " four five")]
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == len(ids) + len(more)
    size = tokenizer.get_vocab_size()
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="echo_llm", prompt=[ids, [size + 5]])
    assert caught.value.param == "prompt"
    assert f"prompt[1]' holds token id {size + 5}" in caught.value.message


def test_token_ids_for_a_model_without_a_tokenizer_are_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="mock_llm", prompt=[1, 2, 3])
    assert caught.value.code == "tokenizer_missing"
    assert "has no tokenizer to decode token ids" in caught.value.message


def test_the_version_folders_template_and_tokenizer_serve_chat(
    client: openai.OpenAI, repo: tuple[Path, Tokenizer]
) -> None:
    reply = client.chat.completions.create(
        model="echo_llm", messages=[{"role": "user", "content": "hello there"}]
    )
    assert reply.choices[0].message.content == " <user> hello there <assistant>"
    assert reply.usage is not None
    rendered = "<user> hello there\n<assistant>"  # the prompt is counted as rendered
    assert reply.usage.prompt_tokens == len(repo[1].encode(rendered).ids) == 8


def test_a_tokenizer_file_linked_out_of_the_model_folder_is_refused(
    client: openai.OpenAI,
) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model="echo_linked", messages=[{"role": "user", "content": "hello"}]
        )
    assert "resolves outside its folder" in caught.value.message


def test_created_is_when_the_model_was_loaded(client: openai.OpenAI, server: ServerProcess) -> None:
    before = {m.id: m.created for m in client.models.list()}
    start = time.time()
    while int(time.time()) <= int(start):  # the next whole second: `created` is in seconds
        time.sleep(0.05)
    reloaded_from = int(time.time())
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120.0) as http:
        http.load_model("echo_llm")
    after = {m.id: m.created for m in client.models.list()}
    assert after["mock_llm"] == before["mock_llm"]
    assert after["echo_llm"] >= reloaded_from > before["echo_llm"]
    assert client.models.retrieve("echo_llm").created == after["echo_llm"]
