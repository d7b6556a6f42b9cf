"""Running one choice of a text request on a decoupled text model: the inference request in
Triton's conventions, and the model's text as deltas with ``stop`` and ``max_tokens`` applied.

The model gets ``text_input`` (the prompt), ``stream`` when it takes it, ``sampling_parameters``
(the vLLM backend's JSON: ``max_tokens``, ``stop``, ``n``=1, and the sampling fields given) when
it takes it, ``exclude_input_in_output`` = true when it takes it, and, for a request that asks
for ``logprobs``, ``return_logprobs`` = true with ``"logprobs": 0`` in ``sampling_parameters``
(the chosen tokens only; a model without that input and a ``logprobs`` output refuses
``logprobs`` by name). A model without
``sampling_parameters`` cannot honour ``temperature``, ``top_p``, ``seed`` or the penalties: a
request that sets one is refused by name. ``stop`` and ``max_tokens`` are applied here as
well (a model that ignores them is cut short; ``max_tokens`` needs the model's tokenizer then),
except ``max_tokens`` for a model that reports its token counts (Triton's vLLM backend's
``return_num_input_tokens`` / ``return_num_output_tokens``, asked for whenever the model has
them): it honours ``max_tokens`` in its own tokens, and its counts are the choice's usage.
Leaving the iterator early cancels the request in the model.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec, TensorSpec
from inferd.core.streaming import ResponseBudget
from inferd.engine import Engine
from inferd.frontends.http.generate import STREAM_RESPONSES
from inferd.frontends.openai.errors import invalid
from inferd.frontends.openai.logprobs import Token, clipped, parse_tokens
from inferd.frontends.openai.models import (
    EXCLUDE_INPUT,
    INPUT_COUNT,
    LOGPROBS,
    OUTPUT_COUNT,
    RETURN_INPUT_COUNT,
    RETURN_LOGPROBS,
    RETURN_OUTPUT_COUNT,
    SAMPLING_PARAMETERS,
    STREAM,
    TEXT_INPUT,
    TEXT_OUTPUT,
)
from inferd.frontends.openai.schemas import TextRequest
from inferd.frontends.openai.tokenizer import TextTokenizer


@dataclass(slots=True)
class Delta:
    """A piece of a choice's text; ``finish_reason`` set on the last one. ``tokens``: the
    tokens that begin in it, when the request asked for ``logprobs``."""

    text: str
    finish_reason: str | None = None
    tokens: list[Token] = field(default_factory=list)
    # on the last delta, from a model that counts its tokens: (prompt tokens, generated tokens)
    counted: tuple[int, int] | None = None


def counts_tokens(spec: ModelSpec) -> bool:
    """Whether the model reports its prompt's and its output's tokens (and, taking
    ``sampling_parameters``, honours ``max_tokens`` in them)."""
    names = (RETURN_INPUT_COUNT, RETURN_OUTPUT_COUNT, SAMPLING_PARAMETERS)
    return all(n in spec.input_by_name for n in names) and all(
        n in spec.output_by_name for n in (INPUT_COUNT, OUTPUT_COUNT)
    )


def gives_logprobs(spec: ModelSpec) -> bool:
    """Whether the model answers ``return_logprobs`` with a ``logprobs`` output."""
    flag = spec.input_by_name.get(RETURN_LOGPROBS)
    output = spec.output_by_name.get(LOGPROBS)
    return (
        flag is not None
        and output is not None
        and output.datatype.is_bytes
        and SAMPLING_PARAMETERS in spec.input_by_name
    )


def check_honoured(spec: ModelSpec, request: TextRequest, tokenizer: TextTokenizer) -> None:
    """Refuse what neither the model nor the server can honour, before the model runs."""
    takes_sampling = SAMPLING_PARAMETERS in spec.input_by_name
    if not takes_sampling:
        for name in request.sampling:
            raise invalid(
                f"the model '{spec.name}' takes no '{SAMPLING_PARAMETERS}' input, so '{name}' "
                "cannot be honoured; leave it out",
                name,
                "unsupported_parameter",
            )
        if request.max_tokens is not None and not tokenizer.counts:
            raise invalid(
                f"the model '{spec.name}' takes no '{SAMPLING_PARAMETERS}' input and has no "
                "tokenizer to count its output, so 'max_tokens' cannot be honoured",
                "max_tokens",
                "unsupported_parameter",
            )
    if request.logprobs and not gives_logprobs(spec):
        raise invalid(
            f"the model '{spec.name}' returns no log probabilities (it has no "
            f"'{RETURN_LOGPROBS}' input and '{LOGPROBS}' output), so 'logprobs' cannot be "
            "honoured; leave it out",
            "logprobs",
            "unsupported_parameter",
        )
    if request.include_usage and not tokenizer.counts and not counts_tokens(spec):
        raise invalid(
            f"the model '{spec.name}' has no tokenizer to count usage with (tokenizer.json "
            "in its version folder or beside its config.pbtxt, or --tokenizer PATH)",
            "stream_options",
            "unsupported_parameter",
        )


def _shape(tensor: TensorSpec, spec: ModelSpec) -> tuple[int, ...]:
    dims = tuple(1 if d < 0 else d for d in tensor.dims)
    if int(np.prod(dims)) != 1:
        raise invalid(f"the model '{spec.name}' input '{tensor.name}' does not take one element")
    return (1, *dims) if spec.max_batch_size > 0 else dims


def build_request(spec: ModelSpec, request: TextRequest, prompt: str) -> InferRequest:
    inputs: dict[str, np.ndarray[Any, Any]] = {}
    by_name = spec.input_by_name
    inputs[TEXT_INPUT] = np.array([prompt.encode()], dtype=object).reshape(
        _shape(by_name[TEXT_INPUT], spec)
    )
    if STREAM in by_name:
        inputs[STREAM] = np.array([request.stream]).reshape(_shape(by_name[STREAM], spec))
    if SAMPLING_PARAMETERS in by_name:
        sampling: dict[str, Any] = dict(request.sampling)
        if request.max_tokens is not None:
            sampling["max_tokens"] = request.max_tokens
        if request.stop:
            sampling["stop"] = list(request.stop)
        if request.logprobs:
            sampling["logprobs"] = 0  # vLLM's count of alternatives: the chosen token only
        payload = orjson.dumps(sampling)
        inputs[SAMPLING_PARAMETERS] = np.array([payload], dtype=object).reshape(
            _shape(by_name[SAMPLING_PARAMETERS], spec)
        )
    if EXCLUDE_INPUT in by_name:
        inputs[EXCLUDE_INPUT] = np.array([True]).reshape(_shape(by_name[EXCLUDE_INPUT], spec))
    if request.logprobs:
        inputs[RETURN_LOGPROBS] = np.array([True]).reshape(_shape(by_name[RETURN_LOGPROBS], spec))
    if counts_tokens(spec):
        for name in (RETURN_INPUT_COUNT, RETURN_OUTPUT_COUNT):
            inputs[name] = np.array([True]).reshape(_shape(by_name[name], spec))
    return InferRequest(spec.name, inputs, id=uuid.uuid4().hex)


def _text(output: np.ndarray[Any, Any]) -> str:
    parts = []
    for item in output.reshape(-1):
        parts.append(item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item))
    return "".join(parts)


class _StopScanner:
    """Finds the first stop sequence across deltas, holding back a tail that may begin one."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = stops
        self._hold = max((len(s) for s in stops), default=1) - 1
        self._buffer = ""

    def feed(self, text: str) -> tuple[str, bool]:
        if not self._stops:
            return text, False
        self._buffer += text
        found = [i for i in (self._buffer.find(s) for s in self._stops) if i >= 0]
        if found:
            out, self._buffer = self._buffer[: min(found)], ""
            return out, True
        safe = max(len(self._buffer) - self._hold, 0)
        out, self._buffer = self._buffer[:safe], self._buffer[safe:]
        return out, False

    def flush(self) -> str:
        out, self._buffer = self._buffer, ""
        return out


def _counts(
    outputs: dict[str, np.ndarray[Any, Any]], prompt_tokens: int, generated: int
) -> tuple[int, int]:
    given = outputs.get(INPUT_COUNT)
    if given is not None and given.size:
        prompt_tokens = int(given.reshape(-1)[0])
    more = outputs.get(OUTPUT_COUNT)
    if more is not None:
        generated += int(more.sum())
    return prompt_tokens, generated


class _Tokens:
    """The tokens received, handed out with the text they begin in as it is sent."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, Token]] = []  # (start in the choice's text, token)
        self._received = 0  # characters of token text received
        self._sent = 0  # characters of text sent

    def add(self, tokens: list[Token]) -> None:
        for token in tokens:
            self._pending.append((self._received, token))
            self._received += len(token.text)

    def take(self, length: int) -> list[Token]:
        self._sent += length
        count = 0
        while count < len(self._pending) and self._pending[count][0] < self._sent:
            count += 1
        taken = [token for _, token in self._pending[:count]]
        if taken:  # a token the text was cut in (stop, max_tokens) keeps the part sent
            start = self._pending[count - 1][0]
            taken[-1] = clipped(taken[-1], self._sent - start)
        del self._pending[:count]
        return taken


async def deltas(
    engine: Engine,
    spec: ModelSpec,
    request: TextRequest,
    prompt: str,
    tokenizer: TextTokenizer,
) -> AsyncGenerator[Delta, None]:
    """The text of one choice, delta by delta; the last delta carries its finish reason."""
    scanner = _StopScanner(request.stop)
    # a model that counts its tokens honours max_tokens itself (its text is not cut again at a
    # re-count, which may differ); the text of others is cut at the tokenizer's count
    counted = counts_tokens(spec)
    limit = request.max_tokens if tokenizer.counts and not counted else None
    used = 0
    prompt_tokens = generated = 0
    tokens = _Tokens()
    infer = build_request(spec, request, prompt)
    events = engine.stream_infer(infer, ResponseBudget(STREAM_RESPONSES))
    async with contextlib.aclosing(events) as stream:
        async for event in stream:
            if event.error is not None:
                raise event.error
            if event.response is not None:
                if counted:
                    prompt_tokens, generated = _counts(
                        event.response.outputs, prompt_tokens, generated
                    )
                if request.logprobs:
                    given = event.response.outputs.get(LOGPROBS)
                    if given is not None:
                        tokens.add(parse_tokens(given))
                output = event.response.outputs.get(TEXT_OUTPUT)
                if output is not None:
                    text, stopped = scanner.feed(_text(output))
                    if limit is not None and text:
                        text, cut = tokenizer.truncate(text, limit - used)
                        used += tokenizer.count(text)
                        if cut or used >= limit:
                            yield Delta(text, "length", tokens.take(len(text)))
                            return  # leaving the stream cancels the request
                    if stopped:
                        yield Delta(
                            text,
                            "stop",
                            tokens.take(len(text)),
                            (prompt_tokens, generated) if counted else None,
                        )
                        return
                    if text:
                        yield Delta(text, None, tokens.take(len(text)))
            if event.final:
                break
    rest = scanner.flush()
    if limit is not None and rest:
        rest, cut = tokenizer.truncate(rest, limit - used)
        used += tokenizer.count(rest)
        if cut or used >= limit:
            yield Delta(rest, "length", tokens.take(len(rest)))
            return
    if counted:
        reason = (
            "length"
            if request.max_tokens is not None and generated >= request.max_tokens
            else "stop"
        )
        yield Delta(rest, reason, tokens.take(len(rest)), (prompt_tokens, generated))
        return
    reason = "length" if request.max_tokens is not None and used >= request.max_tokens else "stop"
    yield Delta(rest, reason, tokens.take(len(rest)))


__all__ = ["Delta", "build_request", "check_honoured", "counts_tokens", "deltas", "gives_logprobs"]
