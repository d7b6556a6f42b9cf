"""The ``sampling_parameters`` input of a generation request, parsed and checked (pure).

The JSON object takes the names of vLLM's ``SamplingParams``, as Triton's vLLM backend and
inferd's ``/v1`` API send them. Numbers may come as JSON numbers or as strings (``"0.7"``),
booleans as JSON booleans or ``"true"``/``"false"``, as Triton's vLLM backend accepts them. A key
this runtime cannot honour, a key that is not a sampling parameter, a wrong type and a value out of
range are each refused with an :class:`InvalidArgumentError` naming the key.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from inferd.errors import InvalidArgumentError

# bounds on what one request may ask for: stop strings are scanned at every token
MAX_STOP_STRINGS = 32
MAX_STOP_CHARS = 256
MAX_STOP_TOKEN_IDS = 256
MAX_SAMPLING_PARAMETERS_BYTES = 64 * 1024
# below this temperature a sequence is decoded greedily (vLLM's _SAMPLING_EPS)
GREEDY_TEMPERATURE = 1e-5

_INPUT = "sampling_parameters"


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one sequence is sampled and when it ends."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    seed: int | None = None
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: bool = False
    min_tokens: int = 0
    # beyond the shared interface (vLLM names, vLLM defaults)
    min_p: float = 0.0  # 0: off
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE


def _fail(key: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{_INPUT}: '{key}' {message}")


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise _fail(key, f"must be a number, got {value!r}")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _fail(key, f"must be a number, got {value!r}") from None
    if not isinstance(value, int | float):
        raise _fail(key, f"must be a number, got {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise _fail(key, f"must be a finite number, got {value!r}")
    return result


def _integer(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise _fail(key, f"must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            value = float(text)
        except ValueError:
            raise _fail(key, f"must be an integer, got {value!r}") from None
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    raise _fail(key, f"must be an integer, got {value!r}")


def _boolean(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _fail(key, f"must be a boolean, got {value!r}")


def _stop(key: str, value: Any) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise _fail(key, "must be a non-empty string or an array of them")
    if len(stops) > MAX_STOP_STRINGS:
        raise _fail(key, f"holds {len(stops)} strings, above the limit of {MAX_STOP_STRINGS}")
    for s in stops:
        if len(s) > MAX_STOP_CHARS:
            raise _fail(
                key, f"holds a string of {len(s)} characters, above the limit of {MAX_STOP_CHARS}"
            )
    return tuple(dict.fromkeys(stops))


def _token_ids(key: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise _fail(key, "must be an array of token ids")
    if len(value) > MAX_STOP_TOKEN_IDS:
        raise _fail(key, f"holds {len(value)} ids, above the limit of {MAX_STOP_TOKEN_IDS}")
    ids = tuple(_integer(key, v) for v in value)
    if any(i < 0 for i in ids):
        raise _fail(key, "must hold token ids of at least 0")
    return ids


def _logprobs(key: str, value: Any) -> bool:
    # vLLM's logprobs is the number of top alternatives besides the chosen token; only the
    # chosen token's log-probability (0, or true) is available here
    if isinstance(value, bool) or (
        isinstance(value, str) and value.strip().lower() in ("true", "false")
    ):
        return _boolean(key, value)
    count = _integer(key, value)
    if count != 0:
        raise _fail(
            key,
            f"is {count}, but only the chosen token's log-probability is available "
            "(0 or true); top alternatives are not supported",
        )
    return True


def _one(expected: Any) -> Callable[[str, Any], None]:
    def check(key: str, value: Any) -> None:
        if value is None:
            return
        if isinstance(expected, bool):
            ok = _boolean(key, value) == expected
        elif isinstance(expected, int):
            ok = _integer(key, value) == expected
        else:
            ok = _number(key, value) == expected
        if not ok:
            raise _fail(key, f"is {value!r}, but this runtime supports only {expected!r}")

    return check


# keys vLLM accepts that this runtime honours only at their neutral value
_NEUTRAL: dict[str, Callable[[str, Any], None]] = {
    "n": _one(1),
    "best_of": _one(1),
    "use_beam_search": _one(False),
    "length_penalty": _one(1.0),
    "detokenize": _one(True),
    "spaces_between_special_tokens": _one(True),
}
# keys vLLM accepts that this runtime does not implement at all (unless null)
_UNSUPPORTED = frozenset(
    {
        "prompt_logprobs",
        "early_stopping",
        "logits_processors",
        "truncate_prompt_tokens",
        "guided_decoding",
        "logit_bias",
        "allowed_token_ids",
        "bad_words",
        "output_kind",
        "extra_args",
    }
)


def _parse_object(text: str | bytes | None) -> dict[str, Any]:
    if text is None:
        return {}
    if len(text) > MAX_SAMPLING_PARAMETERS_BYTES:
        raise InvalidArgumentError(
            f"{_INPUT}: {len(text)} bytes, above the limit of {MAX_SAMPLING_PARAMETERS_BYTES}"
        )
    if not text.strip():
        return {}
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{_INPUT}: not valid JSON: {exc}") from None
    if parsed is None:
        return {}
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(f"{_INPUT}: must be a JSON object")
    return parsed


def parse_sampling_parameters(
    text: str | bytes | None, *, max_tokens_limit: int, returns_logprobs: bool = False
) -> SamplingParams:
    """The :class:`SamplingParams` of a request's ``sampling_parameters`` JSON (None: defaults).

    ``max_tokens`` above ``max_tokens_limit`` is refused; ``"max_tokens": null`` asks for as many
    as allowed (vLLM's meaning of null), so it becomes ``max_tokens_limit``. A key given as null
    keeps its default. ``logprobs`` is refused unless the caller ``returns_logprobs`` (has an
    output to return them in), so it is never accepted and then ignored.
    """
    if max_tokens_limit < 1:
        raise ValueError("max_tokens_limit must be at least 1")
    body = _parse_object(text)
    fields: dict[str, Any] = {}
    for key, value in body.items():
        if key in _NEUTRAL:
            _NEUTRAL[key](key, value)
            continue
        if key in _UNSUPPORTED:
            if value is None:
                continue
            raise _fail(key, "is a vLLM sampling parameter this runtime does not support")
        parse = _FIELDS.get(key)
        if parse is None:
            raise _fail(key, "is not a sampling parameter")
        if value is None:
            if key == "max_tokens":
                fields[key] = max_tokens_limit
            continue
        fields[key] = parse(key, value)
    params = SamplingParams(**fields)
    if params.logprobs and not returns_logprobs:
        raise _fail(
            "logprobs",
            "cannot be honoured: this model's outputs carry only the text, not "
            "log-probabilities; leave it out or false",
        )
    _check(params, max_tokens_limit)
    return params


def _check(p: SamplingParams, max_tokens_limit: int) -> None:
    if p.max_tokens < 1:
        raise _fail("max_tokens", f"must be at least 1, got {p.max_tokens}")
    if p.max_tokens > max_tokens_limit:
        raise _fail(
            "max_tokens",
            f"is {p.max_tokens}, above the limit of {max_tokens_limit} for this request",
        )
    if not 0 <= p.min_tokens <= p.max_tokens:
        raise _fail(
            "min_tokens", f"must be between 0 and max_tokens ({p.max_tokens}), got {p.min_tokens}"
        )
    if p.temperature < 0:
        raise _fail("temperature", f"must be at least 0, got {p.temperature:g}")
    if not 0 < p.top_p <= 1:
        raise _fail("top_p", f"must be in (0, 1], got {p.top_p:g}")
    if p.top_k < 0:
        raise _fail("top_k", f"must be -1 or 0 (off) or at least 1, got {p.top_k}")
    if not 0 <= p.min_p <= 1:
        raise _fail("min_p", f"must be in [0, 1], got {p.min_p:g}")
    if p.repetition_penalty <= 0:
        raise _fail("repetition_penalty", f"must be above 0, got {p.repetition_penalty:g}")
    for key, value in (
        ("presence_penalty", p.presence_penalty),
        ("frequency_penalty", p.frequency_penalty),
    ):
        if not -2 <= value <= 2:
            raise _fail(key, f"must be between -2 and 2, got {value:g}")
    if p.seed is not None and not -(2**63) <= p.seed < 2**64:
        raise _fail("seed", "must fit in 64 bits")


def _top_k(key: str, value: Any) -> int:
    k = _integer(key, value)
    if k == -1:
        return 0
    if k < 0:
        raise _fail(key, f"must be -1 or 0 (off) or at least 1, got {k}")
    return k


_FIELDS: dict[str, Callable[[str, Any], Any]] = {
    "max_tokens": _integer,
    "min_tokens": _integer,
    "temperature": _number,
    "top_p": _number,
    "top_k": _top_k,
    "min_p": _number,
    "seed": _integer,
    "repetition_penalty": _number,
    "presence_penalty": _number,
    "frequency_penalty": _number,
    "stop": _stop,
    "stop_token_ids": _token_ids,
    "ignore_eos": _boolean,
    "logprobs": _logprobs,
    "include_stop_str_in_output": _boolean,
    "skip_special_tokens": _boolean,
}

__all__ = [
    "GREEDY_TEMPERATURE",
    "MAX_STOP_CHARS",
    "MAX_STOP_STRINGS",
    "MAX_STOP_TOKEN_IDS",
    "SamplingParams",
    "parse_sampling_parameters",
]
