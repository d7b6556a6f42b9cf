"""Request bodies of ``/v1/completions`` and ``/v1/chat/completions``, parsed and checked into
typed requests (pure: no I/O, no engine).

Every refusal is a 400 in OpenAI's shape naming the field (``param``). A field OpenAI defines
that inferd cannot honour (``logit_bias``, ``tools``, ``echo``…) is refused by name rather than
ignored; so is a field OpenAI does not define. A completion's ``prompt`` takes OpenAI's four
forms (a string, strings, token ids, lists of token ids); ``logprobs`` asks for the chosen
tokens' log probabilities only (``logprobs: 0`` for completions, ``logprobs: true`` with
``top_logprobs`` 0 or absent for chat): alternatives are refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from inferd.frontends.openai.errors import OpenAIError, invalid
from inferd.frontends.openai.limits import MAX_STOP_SEQUENCES, OpenAILimits

# forwarded to the model in the vLLM backend's ``sampling_parameters`` (JSON)
SAMPLING_FIELDS = ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty")

_COMMON = frozenset(
    {
        "model",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logprobs",
        "user",
        "stream",
        "stream_options",
    }
)
_COMPLETION_FIELDS = _COMMON | {"prompt"}
_CHAT_FIELDS = _COMMON | {"messages", "max_completion_tokens", "top_logprobs"}
# OpenAI's fields that inferd refuses unless they hold their neutral value
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "echo": (False, None),
    "best_of": (1, None),
    "suffix": (None, ""),
    "logit_bias": (None, {}),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "response_format": (None, {"type": "text"}),
    "parallel_tool_calls": (None,),
    "store": (None, False),
    "metadata": (None,),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "service_tier": (None, "auto", "default"),
    "reasoning_effort": (None,),
}
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


@dataclass(slots=True)
class TextRequest:
    """What both endpoints ask of a text model."""

    model: str
    max_tokens: int | None = None
    n: int = 1
    stop: tuple[str, ...] = ()
    sampling: dict[str, float | int] = field(default_factory=dict)  # SAMPLING_FIELDS given
    stream: bool = False
    include_usage: bool = False
    user: str | None = None
    logprobs: bool = False  # the chosen tokens' log probabilities (the model must give them)


@dataclass(slots=True)
class CompletionRequest(TextRequest):
    # one entry per prompt: its text, or its token ids (decoded with the model's tokenizer)
    prompts: tuple[str | tuple[int, ...], ...] = ()


@dataclass(slots=True)
class ChatRequest(TextRequest):
    messages: list[dict[str, Any]] = field(default_factory=list)


def parse_body(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise invalid("the request body must be a JSON object")
    return parsed


def parse_completion(body: dict[str, Any], limits: OpenAILimits) -> CompletionRequest:
    _check_fields(body, _COMPLETION_FIELDS)
    request = CompletionRequest(model="", prompts=_prompts(body.get("prompt")))
    _fill(request, body, limits, "max_tokens")
    choices = len(request.prompts) * request.n
    if choices > limits.max_n:
        raise invalid(
            f"{len(request.prompts)} prompts with 'n' {request.n} ask for {choices} choices, above "
            f"this server's limit of {limits.max_n} (--openai-max-n)",
            "prompt",
            "n_limit_exceeded",
        )
    logprobs = body.get("logprobs")
    if logprobs is not None:
        if not _is_int(logprobs) or logprobs < 0:
            raise invalid("'logprobs' must be an integer of at least 0", "logprobs")
        if logprobs > 0:
            raise _no_top_logprobs("logprobs", logprobs)
        request.logprobs = True
    return request


def _prompts(prompt: Any) -> tuple[str | tuple[int, ...], ...]:
    """A prompt, a list of prompts, token ids or a list of token-id lists (OpenAI's four
    forms), as one entry per prompt."""
    if isinstance(prompt, str):
        return (prompt,)
    if not isinstance(prompt, list) or not prompt:
        raise invalid(
            "'prompt' is required: a string, an array of strings, an array of token ids or an "
            "array of arrays of token ids",
            "prompt",
        )
    if all(isinstance(p, str) for p in prompt):
        return tuple(prompt)
    if all(_is_int(t) for t in prompt):
        return (_token_ids(prompt, "prompt"),)
    if all(isinstance(p, list) for p in prompt):
        return tuple(_token_ids(p, f"prompt[{i}]") for i, p in enumerate(prompt))
    raise invalid(
        "'prompt' must be a string, an array of strings, an array of token ids or an array of "
        "arrays of token ids (not a mix)",
        "prompt",
    )


def _token_ids(ids: list[Any], where: str) -> tuple[int, ...]:
    if not ids or not all(_is_int(t) and t >= 0 for t in ids):
        raise invalid(f"'{where}' must be a non-empty array of token ids (integers >= 0)", "prompt")
    return tuple(ids)


def parse_chat(body: dict[str, Any], limits: OpenAILimits) -> ChatRequest:
    _check_fields(body, _CHAT_FIELDS)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' is required and must be a non-empty array", "messages")
    request = ChatRequest(model="", messages=[_message(m, i) for i, m in enumerate(messages)])
    tokens_key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    if "max_completion_tokens" in body and body.get("max_tokens") is not None:
        raise invalid(
            "give either 'max_tokens' or 'max_completion_tokens', not both",
            "max_completion_tokens",
        )
    _fill(request, body, limits, tokens_key)
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise invalid("'logprobs' must be a boolean", "logprobs")
    top = body.get("top_logprobs")
    if top is not None:
        if not _is_int(top) or not 0 <= top <= 20:
            raise invalid("'top_logprobs' must be an integer between 0 and 20", "top_logprobs")
        if not logprobs:
            raise invalid("'top_logprobs' needs 'logprobs' set to true", "top_logprobs")
        if top > 0:
            raise _no_top_logprobs("top_logprobs", top)
    request.logprobs = bool(logprobs)
    return request


def _check_fields(body: dict[str, Any], known: frozenset[str]) -> None:
    for key, value in body.items():
        if key in known:
            continue
        if key in _NEUTRAL:
            if value in _NEUTRAL[key]:
                continue
            raise invalid(f"'{key}' is not supported by this server", key, "unsupported_parameter")
        raise invalid(f"Unrecognized request argument supplied: {key}", key, "unknown_parameter")


def _fill(
    request: TextRequest, body: dict[str, Any], limits: OpenAILimits, tokens_key: str
) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("'model' is required and must be a non-empty string", "model")
    request.model = model
    max_tokens = body.get(tokens_key)
    if max_tokens is not None:
        if not _is_int(max_tokens) or max_tokens < 1:
            raise invalid(f"'{tokens_key}' must be an integer of at least 1", tokens_key)
        if max_tokens > limits.max_tokens:
            raise invalid(
                f"'{tokens_key}' is {max_tokens}, above this server's limit of "
                f"{limits.max_tokens} (--openai-max-tokens)",
                tokens_key,
                "max_tokens_limit_exceeded",
            )
        request.max_tokens = max_tokens
    n = body.get("n")
    if n is not None:
        if not _is_int(n) or n < 1:
            raise invalid("'n' must be an integer of at least 1", "n")
        if n > limits.max_n:
            raise invalid(
                f"'n' is {n}, above this server's limit of {limits.max_n} (--openai-max-n)",
                "n",
                "n_limit_exceeded",
            )
        request.n = n
    request.stop = _stop(body.get("stop"))
    for name in SAMPLING_FIELDS:
        value = body.get(name)
        if value is None:
            continue
        if name == "seed":
            if not _is_int(value):
                raise invalid("'seed' must be an integer", "seed")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise invalid(f"'{name}' must be a number", name)
        _check_range(name, value)
        request.sampling[name] = value
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise invalid("'stream' must be a boolean", "stream")
    request.stream = bool(stream)
    options = body.get("stream_options")
    if options is not None:
        if not request.stream:
            raise invalid(
                "'stream_options' is only allowed when 'stream' is true", "stream_options"
            )
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise invalid("'stream_options' may only hold 'include_usage'", "stream_options")
        usage = options.get("include_usage", False)
        if not isinstance(usage, bool):
            raise invalid("'stream_options.include_usage' must be a boolean", "stream_options")
        request.include_usage = usage
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid("'user' must be a string", "user")
    request.user = user


_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
}


def _check_range(name: str, value: float) -> None:
    bounds = _RANGES.get(name)
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise invalid(f"'{name}' must be between {bounds[0]:g} and {bounds[1]:g}", name)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise invalid("'stop' must be a non-empty string or an array of them", "stop")
    if len(stops) > MAX_STOP_SEQUENCES:
        raise invalid(f"'stop' may hold at most {MAX_STOP_SEQUENCES} sequences", "stop")
    return tuple(stops)


def _message(message: Any, index: int) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise invalid(f"'{where}' must be an object", "messages")
    role = message.get("role")
    if role not in _ROLES:
        raise invalid(f"'{where}.role' must be one of {', '.join(sorted(_ROLES))}", "messages")
    content = message.get("content")
    if isinstance(content, list):  # content parts: text only
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise invalid(f"'{where}.content' may hold only text parts", "messages")
            text = part.get("text")
            if not isinstance(text, str):
                raise invalid(f"'{where}.content' text parts must hold a string", "messages")
            texts.append(text)
        content = "".join(texts)
    elif content is None and role == "assistant":
        content = ""
    elif not isinstance(content, str):
        raise invalid(f"'{where}.content' must be a string or an array of text parts", "messages")
    shaped: dict[str, Any] = {"role": role, "content": content}
    name = message.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise invalid(f"'{where}.name' must be a string", "messages")
        shaped["name"] = name
    return shaped


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _no_top_logprobs(name: str, value: int) -> OpenAIError:
    return invalid(
        f"'{name}' is {value}, but only the chosen token's log probability is available "
        "(alternatives are not): ask for 0",
        name,
        "unsupported_parameter",
    )


__all__ = [
    "SAMPLING_FIELDS",
    "ChatRequest",
    "CompletionRequest",
    "TextRequest",
    "parse_body",
    "parse_chat",
    "parse_completion",
]
