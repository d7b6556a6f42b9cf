"""The llm runtime's ``sampling_parameters`` parsing: vLLM's keys, their types and ranges."""

from __future__ import annotations

import orjson
import pytest

from inferd.backends.llm.params import (
    MAX_STOP_STRINGS,
    SamplingParams,
    parse_sampling_parameters,
)
from inferd.core.datatypes import BYTES
from inferd.core.model_spec import ModelSpec, TensorSpec
from inferd.errors import InvalidArgumentError
from inferd.frontends.openai.generation import build_request
from inferd.frontends.openai.limits import OpenAILimits
from inferd.frontends.openai.models import SAMPLING_PARAMETERS, TEXT_INPUT
from inferd.frontends.openai.schemas import parse_completion

LIMIT = 512


def parse(body: object, *, returns_logprobs: bool = True) -> SamplingParams:
    return parse_sampling_parameters(
        orjson.dumps(body), max_tokens_limit=LIMIT, returns_logprobs=returns_logprobs
    )


def test_absent_or_empty_gives_vllm_defaults() -> None:
    for text in (None, b"", "  ", b"null", "{}"):
        assert parse_sampling_parameters(text, max_tokens_limit=LIMIT) == SamplingParams()
    assert SamplingParams().max_tokens == 16


def test_every_key_is_honoured() -> None:
    params = parse(
        {
            "max_tokens": 40,
            "min_tokens": 3,
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 12,
            "min_p": 0.05,
            "seed": 7,
            "repetition_penalty": 1.2,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "stop": ["\n\n", "END"],
            "stop_token_ids": [2, 3],
            "ignore_eos": True,
            "logprobs": 0,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
            "n": 1,
            "best_of": None,
            "use_beam_search": False,
        }
    )
    assert params == SamplingParams(
        max_tokens=40,
        min_tokens=3,
        temperature=0.7,
        top_p=0.9,
        top_k=12,
        min_p=0.05,
        seed=7,
        repetition_penalty=1.2,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        stop=("\n\n", "END"),
        stop_token_ids=(2, 3),
        ignore_eos=True,
        logprobs=True,
        include_stop_str_in_output=True,
        skip_special_tokens=False,
    )


def test_strings_as_tritons_vllm_backend_accepts_them() -> None:
    params = parse(
        {
            "temperature": "0.5",
            "max_tokens": "20",
            "top_k": "-1",
            "seed": "3",
            "ignore_eos": "true",
            "top_p": 1,
            "stop": "x",
        }
    )
    assert params.temperature == 0.5
    assert params.max_tokens == 20
    assert params.top_k == 0
    assert params.seed == 3
    assert params.ignore_eos is True
    assert params.stop == ("x",)
    assert parse({"max_tokens": 8.0}).max_tokens == 8
    assert parse({"ignore_eos": "False"}).ignore_eos is False


def test_null_max_tokens_asks_for_the_limit() -> None:
    assert parse({"max_tokens": None}).max_tokens == LIMIT
    assert parse({"temperature": None}).temperature == 1.0


def test_what_the_openai_front_end_sends_is_accepted() -> None:
    body = {
        "model": "m",
        "prompt": "hi",
        "max_tokens": 9,
        "temperature": 0,
        "top_p": 0.5,
        "seed": -4,
        "presence_penalty": 1,
        "frequency_penalty": 2,
        "stop": ["a", "b"],
    }
    request = parse_completion(body, OpenAILimits())
    inputs = tuple(TensorSpec(name, BYTES, (1,)) for name in (TEXT_INPUT, SAMPLING_PARAMETERS))
    spec = ModelSpec("m", "", "llm", 0, inputs, (), (), {}, "")
    infer = build_request(spec, request, "hi")
    payload = infer.inputs[SAMPLING_PARAMETERS].reshape(-1)[0]
    params = parse_sampling_parameters(payload, max_tokens_limit=LIMIT)
    assert params.max_tokens == 9
    assert params.greedy
    assert params.top_p == 0.5
    assert params.seed == -4
    assert params.presence_penalty == 1
    assert params.frequency_penalty == 2
    assert params.stop == ("a", "b")


@pytest.mark.parametrize(
    ("body", "key", "words"),
    [
        ({"temprature": 1}, "temprature", "not a sampling parameter"),
        ({"guided_decoding": {"json": {}}}, "guided_decoding", "does not support"),
        ({"prompt_logprobs": 1}, "prompt_logprobs", "does not support"),
        ({"n": 2}, "n", "supports only 1"),
        ({"best_of": 3}, "best_of", "supports only 1"),
        ({"use_beam_search": True}, "use_beam_search", "supports only False"),
        ({"max_tokens": 0}, "max_tokens", "at least 1"),
        ({"max_tokens": LIMIT + 1}, "max_tokens", "limit of 512 for this request"),
        ({"max_tokens": 1.5}, "max_tokens", "integer"),
        ({"max_tokens": "many"}, "max_tokens", "integer"),
        ({"min_tokens": 20}, "min_tokens", "between 0 and max_tokens"),
        ({"temperature": -0.1}, "temperature", "at least 0"),
        ({"temperature": True}, "temperature", "number"),
        ({"temperature": "hot"}, "temperature", "number"),
        ({"temperature": "nan"}, "temperature", "finite"),
        ({"top_p": 0}, "top_p", "(0, 1]"),
        ({"top_p": 1.01}, "top_p", "(0, 1]"),
        ({"top_k": -2}, "top_k", "-1 or 0"),
        ({"min_p": 2}, "min_p", "[0, 1]"),
        ({"repetition_penalty": 0}, "repetition_penalty", "above 0"),
        ({"presence_penalty": 2.5}, "presence_penalty", "between -2 and 2"),
        ({"frequency_penalty": -3}, "frequency_penalty", "between -2 and 2"),
        ({"seed": str(2**64)}, "seed", "64 bits"),
        ({"seed": "x"}, "seed", "integer"),
        ({"stop": ""}, "stop", "non-empty string"),
        ({"stop": ["a", 3]}, "stop", "non-empty string"),
        ({"stop": ["s"] * (MAX_STOP_STRINGS + 1)}, "stop", "limit"),
        ({"stop": "x" * 1000}, "stop", "characters"),
        ({"stop_token_ids": 5}, "stop_token_ids", "array"),
        ({"stop_token_ids": [-1]}, "stop_token_ids", "at least 0"),
        ({"ignore_eos": "maybe"}, "ignore_eos", "boolean"),
        ({"logprobs": 5}, "logprobs", "top alternatives"),
    ],
)
def test_bad_values_are_refused_naming_the_key(body: object, key: str, words: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        parse(body)
    message = str(caught.value)
    assert f"'{key}'" in message
    assert "sampling_parameters" in message
    assert words in message


@pytest.mark.parametrize("text", [b"{", b"[1]", b'"x"', '{"a": }'])
def test_malformed_json_is_refused(text: bytes | str) -> None:
    with pytest.raises(InvalidArgumentError, match="sampling_parameters"):
        parse_sampling_parameters(text, max_tokens_limit=LIMIT)


def test_oversized_payload_is_refused() -> None:
    text = orjson.dumps({"stop": ["a"], "pad": "x" * 70_000})
    with pytest.raises(InvalidArgumentError, match="bytes, above the limit"):
        parse_sampling_parameters(text, max_tokens_limit=LIMIT)


def test_logprobs_are_refused_where_nothing_returns_them() -> None:
    for value in (True, 0, "true"):
        with pytest.raises(InvalidArgumentError, match="'logprobs' cannot be honoured"):
            parse({"logprobs": value}, returns_logprobs=False)
    assert parse({"logprobs": False}, returns_logprobs=False).logprobs is False
    assert parse({"logprobs": None}, returns_logprobs=False).logprobs is False
    assert parse({"logprobs": 0}).logprobs is True
