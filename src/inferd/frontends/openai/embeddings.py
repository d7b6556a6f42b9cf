"""``POST /v1/embeddings``: OpenAI's embeddings endpoint over the repository's embedding models.

An embedding model is one whose configuration names a ``tokenizer``
(:mod:`inferd.backends.text_encoder`): the server tokenises, so a client sends text. Each input
becomes one v2 request of the model (``text`` [1, 1] BYTES, or ``tokens`` [1, n] INT64 for a
token array); the model's dynamic batcher groups them with whatever else is queued, and pads
each batch to its own longest input.

Accepted fields: ``model``, ``input`` (a string, a list of strings, a token array or a list of
token arrays), ``encoding_format`` (``float`` or ``base64``: little-endian float32 bytes),
``dimensions`` (models configured with ``truncate_dimensions``: the first ``n`` values,
re-normalised when the model normalises) and ``user`` (accepted, unused). Any other field is
refused with a 400 naming it, as are more than :data:`MAX_INPUTS` inputs and an input longer
than the model's ``max_length`` tokens.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any, Protocol

import numpy as np
import orjson

from inferd.backends.text_encoder import (
    COUNT_OUTPUT,
    EMBEDDING_OUTPUT,
    TEXT_INPUT,
    TOKENS_INPUT,
    InputTooLongError,
    is_text_encoder,
)
from inferd.core.inference import InferRequest, InferResponse
from inferd.core.model_spec import ModelSpec
from inferd.errors import InvalidArgumentError, NotFoundError
from inferd.frontends.openai.errors import invalid, model_not_found

__all__ = ["MAX_INPUTS", "create_embeddings", "serves_embeddings"]

#: inputs one request may carry (OpenAI's own limit)
MAX_INPUTS = 2048
_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})
_FORMATS = ("float", "base64")


class EmbeddingEngine(Protocol):
    """What this endpoint needs of :class:`inferd.engine.Engine`."""

    def model_config(self, name: str, version: str = "") -> ModelSpec: ...

    async def infer(self, request: InferRequest) -> InferResponse: ...


def serves_embeddings(config: ModelSpec) -> bool:
    """True when the model answers ``/v1/embeddings`` (an embedding model with a tokenizer)."""
    return (
        is_text_encoder(config)
        and TEXT_INPUT in config.input_by_name
        and EMBEDDING_OUTPUT in config.output_by_name
    )


def _body(body: bytes | dict[str, Any]) -> dict[str, Any]:
    if isinstance(body, dict):
        return body
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise invalid("the request body must be a JSON object")
    return parsed


def _is_token(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _inputs(raw: object) -> list[str | list[int]]:
    """``input`` as a list of texts and token arrays; 400 naming ``input`` when malformed."""
    if isinstance(raw, str):
        items: list[object] = [raw]
    elif isinstance(raw, list) and raw and all(_is_token(v) for v in raw):
        items = [raw]  # one token array
    elif isinstance(raw, list):
        items = list(raw)
    else:
        raise invalid(
            "'input' must be a string, a list of strings, a token array or a list of token arrays",
            param="input",
        )
    if not items:
        raise invalid("'input' must not be empty", param="input")
    if len(items) > MAX_INPUTS:
        raise invalid(
            f"'input' has {len(items)} items, more than the limit of {MAX_INPUTS} per request",
            param="input",
            code="too_many_inputs",
        )
    out: list[str | list[int]] = []
    for index, item in enumerate(items):
        if isinstance(item, str):
            if not item:
                raise invalid(f"input {index} is an empty string", param="input")
            out.append(item)
        elif isinstance(item, list) and item and all(_is_token(v) for v in item):
            out.append(item)
        else:
            raise invalid(
                f"input {index} must be a non-empty string or a non-empty array of token ids",
                param="input",
            )
    return out


def _request(model: str, item: str | list[int], index: int) -> InferRequest:
    if isinstance(item, str):
        array = np.empty((1, 1), dtype=object)
        array[0, 0] = item.encode("utf-8", "surrogatepass")
        inputs = {TEXT_INPUT: array}
    else:
        try:
            inputs = {TOKENS_INPUT: np.array([item], dtype=np.int64)}
        except OverflowError as exc:
            raise invalid(f"input {index} holds a token id out of range", param="input") from exc
    return InferRequest(model_name=model, inputs=inputs, id=f"embedding-{index}")


async def _embed(engine: EmbeddingEngine, request: InferRequest, index: int) -> InferResponse:
    try:
        return await engine.infer(request)
    except InputTooLongError as exc:
        message = exc.message.removeprefix("the input ")
        raise invalid(
            f"input {index} {message}", param="input", code="context_length_exceeded"
        ) from exc
    except InvalidArgumentError as exc:
        raise invalid(f"input {index}: {exc.message}", param="input") from exc


def _dimensions(raw: object, spec: ModelSpec) -> int | None:
    if raw is None:
        return None
    size = spec.output_by_name[EMBEDDING_OUTPUT].dims[0]
    if not isinstance(raw, int) or isinstance(raw, bool) or not 0 < raw <= size:
        raise invalid(
            f"'dimensions' must be an integer from 1 to {size} for model '{spec.name}'",
            param="dimensions",
        )
    truncatable = spec.parameters.get("truncate_dimensions", "").strip().lower()
    if raw != size and truncatable not in ("1", "true", "on", "yes"):
        raise invalid(
            f"model '{spec.name}' does not support 'dimensions' (its embeddings have {size} "
            "dimensions and it is not configured with truncate_dimensions)",
            param="dimensions",
        )
    return raw


def _normalizes(spec: ModelSpec) -> bool:
    return spec.parameters.get("normalize", "true").strip().lower() in ("1", "true", "on", "yes")


async def create_embeddings(
    engine: EmbeddingEngine, body: bytes | dict[str, Any]
) -> dict[str, Any]:
    """Answer one ``/v1/embeddings`` request (OpenAI's response shape, as a JSON-ready dict).

    Refusals raise :class:`~inferd.frontends.openai.errors.OpenAIError`; the model's own
    errors raise inferd's errors (the caller maps them with ``as_openai_error``)."""
    fields = _body(body)
    unknown = sorted(set(fields) - _FIELDS)
    if unknown:
        raise invalid(f"unrecognized request argument: '{unknown[0]}'", param=unknown[0])
    model = fields.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("'model' must be a non-empty string", param="model")
    try:
        spec = engine.model_config(model)
    except NotFoundError as exc:
        raise model_not_found(model) from exc
    if not serves_embeddings(spec):
        raise model_not_found(model)
    if "input" not in fields:
        raise invalid("'input' is required", param="input")
    items = _inputs(fields["input"])
    if TOKENS_INPUT not in spec.input_by_name and any(not isinstance(i, str) for i in items):
        raise invalid(
            f"model '{model}' does not accept token arrays (it has no '{TOKENS_INPUT}' input)",
            param="input",
        )
    encoding = fields.get("encoding_format", "float")
    if encoding not in _FORMATS:
        raise invalid("'encoding_format' must be 'float' or 'base64'", param="encoding_format")
    dims = _dimensions(fields.get("dimensions"), spec)
    user = fields.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid("'user' must be a string", param="user")
    requests = [_request(model, item, i) for i, item in enumerate(items)]
    answers = await asyncio.gather(
        *(_embed(engine, r, i) for i, r in enumerate(requests)), return_exceptions=True
    )
    responses: list[InferResponse] = []
    for answer in answers:  # the first failing input, in input order
        if isinstance(answer, BaseException):
            raise answer
        responses.append(answer)
    vectors = np.concatenate([r.outputs[EMBEDDING_OUTPUT] for r in responses]).astype(np.float32)
    tokens = int(sum(int(r.outputs[COUNT_OUTPUT].sum()) for r in responses))
    if dims is not None and dims != vectors.shape[1]:
        vectors = vectors[:, :dims]
        if _normalizes(spec):
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
    vectors = np.ascontiguousarray(vectors, dtype="<f4")
    data = [
        {
            "object": "embedding",
            "index": i,
            "embedding": (
                base64.b64encode(row.tobytes()).decode("ascii")
                if encoding == "base64"
                else row.tolist()
            ),
        }
        for i, row in enumerate(vectors)
    ]
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
