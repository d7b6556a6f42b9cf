"""The pure parts of ``/v1``: request parsing and limits, stop sequences across deltas, chat
templates rendered as Hugging Face renders them, and the configuration's checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from inferd.errors import InvalidArgumentError
from inferd.frontends.access import parse_restriction
from inferd.frontends.openai.errors import OpenAIError
from inferd.frontends.openai.generation import _StopScanner
from inferd.frontends.openai.limits import OpenAILimits
from inferd.frontends.openai.schemas import parse_body, parse_chat, parse_completion
from inferd.frontends.openai.tokenizer import load_tokenizer
from inferd.server.config import ServerConfig

LIMITS = OpenAILimits(max_tokens=100, max_n=4, max_body_bytes=1000)


def _refused(body: dict[str, Any], chat: bool = False) -> OpenAIError:
    with pytest.raises(OpenAIError) as caught:
        (parse_chat if chat else parse_completion)(body, LIMITS)
    assert caught.value.status == 400
    return caught.value


def test_a_completion_request_is_parsed_into_its_fields() -> None:
    request = parse_completion(
        {
            "model": "m",
            "prompt": ["hi"],
            "max_tokens": 5,
            "n": 2,
            "stop": "x",
            "temperature": 0,
            "seed": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
            "user": "u",
            "echo": False,  # neutral values of unsupported fields pass
        },
        LIMITS,
    )
    assert (request.model, request.prompts, request.max_tokens, request.n) == ("m", ("hi",), 5, 2)
    assert request.stop == ("x",)
    assert request.sampling == {"temperature": 0, "seed": 3}
    assert request.stream
    assert request.include_usage
    assert request.user == "u"


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"prompt": "x"}, "model", "required"),
        ({"model": "m"}, "prompt", "required"),
        ({"model": "m", "prompt": ["a", "b"], "n": 3}, "prompt", "6 choices"),
        ({"model": "m", "prompt": ["a", 1]}, "prompt", "not a mix"),
        ({"model": "m", "prompt": [[1], []]}, "prompt", "prompt[1]"),
        ({"model": "m", "prompt": [-1]}, "prompt", "token ids"),
        ({"model": "m", "prompt": []}, "prompt", "required"),
        ({"model": "m", "prompt": "x", "logprobs": -1}, "logprobs", "at least 0"),
        ({"model": "m", "prompt": "x", "max_tokens": 101}, "max_tokens", "--openai-max-tokens"),
        ({"model": "m", "prompt": "x", "max_tokens": 0}, "max_tokens", "at least 1"),
        ({"model": "m", "prompt": "x", "max_tokens": True}, "max_tokens", "integer"),
        ({"model": "m", "prompt": "x", "n": 5}, "n", "--openai-max-n"),
        ({"model": "m", "prompt": "x", "temperature": 3}, "temperature", "between 0 and 2"),
        ({"model": "m", "prompt": "x", "top_p": "1"}, "top_p", "number"),
        ({"model": "m", "prompt": "x", "stop": ["a"] * 5}, "stop", "at most 4"),
        ({"model": "m", "prompt": "x", "stop": [""]}, "stop", "non-empty"),
        ({"model": "m", "prompt": "x", "logprobs": 1}, "logprobs", "chosen token's"),
        ({"model": "m", "prompt": "x", "echo": True}, "echo", "not supported"),
        ({"model": "m", "prompt": "x", "stream_options": {}}, "stream_options", "stream"),
        ({"model": "m", "prompt": "x", "bogus": 1}, "bogus", "Unrecognized"),
    ],
)
def test_completion_refusals_name_the_field(body: dict[str, Any], param: str, words: str) -> None:
    error = _refused(body)
    assert error.param == param
    assert words in error.message
    assert error.body()["error"]["type"] == "invalid_request_error"


def test_a_completion_prompt_takes_openais_four_forms() -> None:
    def prompts(prompt: Any) -> tuple[Any, ...]:
        return parse_completion({"model": "m", "prompt": prompt}, LIMITS).prompts

    assert prompts("a") == ("a",)
    assert prompts(["a", "b"]) == ("a", "b")
    assert prompts([5, 6]) == ((5, 6),)
    assert prompts([[5], [6, 7]]) == ((5,), (6, 7))
    request = parse_completion({"model": "m", "prompt": "a", "logprobs": 0}, LIMITS)
    assert request.logprobs


def test_chat_logprobs_take_only_the_chosen_token() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert parse_chat({**base, "logprobs": True, "top_logprobs": 0}, LIMITS).logprobs
    assert not parse_chat(base, LIMITS).logprobs
    assert _refused({**base, "logprobs": True, "top_logprobs": 2}, True).param == "top_logprobs"
    assert _refused({**base, "top_logprobs": 0}, True).param == "top_logprobs"
    assert _refused({**base, "logprobs": 1}, True).param == "logprobs"


def test_chat_messages_and_max_completion_tokens() -> None:
    request = parse_chat(
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
                {"role": "assistant", "content": None},
            ],
            "max_completion_tokens": 7,
        },
        LIMITS,
    )
    assert request.messages == [
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": ""},
    ]
    assert request.max_tokens == 7
    assert _refused({"model": "m", "messages": []}, chat=True).param == "messages"
    bad_role = {"model": "m", "messages": [{"role": "wizard", "content": "x"}]}
    assert "role" in _refused(bad_role, chat=True).message
    image = {"type": "image_url", "image_url": {"url": "x"}}
    assert (
        "text parts"
        in _refused(
            {"model": "m", "messages": [{"role": "user", "content": [image]}]}, chat=True
        ).message
    )
    both = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    both |= {"max_tokens": 1, "max_completion_tokens": 1}
    assert _refused(both, chat=True).param == "max_completion_tokens"
    over = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert _refused(over | {"max_completion_tokens": 101}, chat=True).param == (
        "max_completion_tokens"
    )


def test_parse_body_refuses_what_is_not_a_json_object() -> None:
    assert parse_body(b'{"a": 1}') == {"a": 1}
    for body in (b"[1]", b"{", b""):
        with pytest.raises(OpenAIError):
            parse_body(body)


def _scan(stops: tuple[str, ...], pieces: list[str]) -> tuple[str, bool]:
    scanner = _StopScanner(stops)
    out = []
    for piece in pieces:
        text, stopped = scanner.feed(piece)
        out.append(text)
        if stopped:
            return "".join(out), True
    return "".join(out) + scanner.flush(), False


def test_a_stop_sequence_split_across_deltas_is_found() -> None:
    assert _scan(("END",), ["ab", "cE", "N", "Dxyz"]) == ("abc", True)
    assert _scan(("END", "c"), ["ab", "cEND"]) == ("ab", True)
    assert _scan(("END",), ["ab", "EN", "d"]) == ("abENd", False)  # held back, then released
    assert _scan((), ["a", "b"]) == ("ab", False)


def _word_tokenizer(folder: Path, config: dict[str, Any]) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(["hello world a b c"], trainers.WordLevelTrainer())
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return tokenizer


TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if loop.first and m.role != 'system' %}"
    "{{ raise_exception('a system message first') }}{% endif %}"
    "[{{ m.role | upper }}] {{ m.content | trim }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}[ASSISTANT]{% endif %}{{ {'k': 'v'} | tojson }}"
)


def test_templates_render_as_hugging_face_renders_them(tmp_path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    config = {"chat_template": TEMPLATE, "bos_token": "<s>", "eos_token": {"content": "</s>"}}
    tokenizer = _word_tokenizer(tmp_path, config)
    messages = [
        {"role": "system", "content": " be brief "},
        {"role": "user", "content": "hello world"},
    ]
    ours = load_tokenizer("m", tmp_path)
    reference = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, chat_template=TEMPLATE, bos_token="<s>", eos_token="</s>"
    )
    expected = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert ours.render(messages) == expected
    assert ours.count("hello world c") == 3
    assert ours.truncate("hello world c", 2) == ("hello world", True)
    assert ours.truncate("hello", 2) == ("hello", False)
    with pytest.raises(OpenAIError) as caught:
        ours.render([{"role": "user", "content": "x"}])
    assert caught.value.status == 400
    assert "a system message first" in caught.value.message


def test_the_template_sandbox_refuses_reaching_into_python(tmp_path: Path) -> None:
    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    _word_tokenizer(tmp_path, {"chat_template": escape})
    with pytest.raises(OpenAIError) as caught:
        load_tokenizer("m", tmp_path).render([{"role": "user", "content": "x"}])
    assert caught.value.status == 400


def test_a_model_without_a_template_gets_a_clear_error(tmp_path: Path) -> None:
    _word_tokenizer(tmp_path, {})
    loaded = load_tokenizer("m", tmp_path)
    assert loaded.counts
    with pytest.raises(OpenAIError) as caught:
        loaded.render([{"role": "user", "content": "x"}])
    assert caught.value.code == "chat_template_missing"
    assert not load_tokenizer("m", None).counts


def test_the_openai_group_is_http_only_and_limits_are_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="openai"):
        ServerConfig(
            model_repositories=(Path("."),),
            grpc_restricted_protocols=(parse_restriction("openai:k=v"),),
        )
    with pytest.raises(InvalidArgumentError, match="--openai-max-n"):
        ServerConfig(model_repositories=(Path("."),), openai_max_n=0)
    with pytest.raises(InvalidArgumentError, match="--openai-port"):
        ServerConfig(model_repositories=(Path("."),), openai_port=70000)


def test_the_serve_flags_reach_the_configuration(tmp_path: Path) -> None:
    from inferd.cli.main import build_parser
    from inferd.cli.serve import config_from_args

    def config(*flags: str) -> ServerConfig:
        args = build_parser().parse_args(["serve", "--model-repository", str(tmp_path), *flags])
        return config_from_args(args)

    default = config()
    assert default.openai_port is None
    assert default.openai_tokenizer is None
    assert default.openai_limits() == OpenAILimits()
    chosen = config(
        "--openai-port=9000",
        f"--tokenizer={tmp_path}",
        "--openai-max-tokens=5",
        "--openai-max-n=2",
        "--openai-max-body-size=100",
    )
    assert chosen.openai_port == 9000
    assert chosen.openai_tokenizer == tmp_path.resolve()
    assert chosen.openai_limits() == OpenAILimits(max_tokens=5, max_n=2, max_body_bytes=100)
    with pytest.raises(InvalidArgumentError, match="--tokenizer"):
        config(f"--tokenizer={tmp_path / 'missing'}")
