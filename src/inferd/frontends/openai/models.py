"""Which models answer ``/v1``, by Triton's conventions, and ``GET /v1/models[/{id}]``.

A **text model** serves completions and chat: decoupled, with a ``text_input`` (BYTES) input and a
``text_output`` (BYTES) output; it may also take ``stream`` (BOOL), the vLLM backend's
``sampling_parameters`` (BYTES holding JSON) and ``exclude_input_in_output`` (BOOL), and answer
``logprobs`` when it takes ``return_logprobs`` (BOOL) and has a ``logprobs`` (BYTES) output. An
**embedding model** is whatever :func:`inferd.frontends.openai.embeddings.serves_embeddings` says
it is, when that module is present. A model's ``created`` is when the version that answers it
was loaded (Unix seconds): a reload changes it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from inferd.core.model_spec import ModelSpec
from inferd.engine import Engine
from inferd.errors import InferdError
from inferd.frontends.openai.errors import OpenAIError, model_not_found

OWNER = "inferd"
TEXT_INPUT = "text_input"
TEXT_OUTPUT = "text_output"
STREAM = "stream"
SAMPLING_PARAMETERS = "sampling_parameters"
EXCLUDE_INPUT = "exclude_input_in_output"
RETURN_LOGPROBS = "return_logprobs"  # Triton's vLLM backend: asks for the output below
LOGPROBS = "logprobs"
RETURN_INPUT_COUNT = "return_num_input_tokens"  # Triton's vLLM backend: the token counts
INPUT_COUNT = "num_input_tokens"
RETURN_OUTPUT_COUNT = "return_num_output_tokens"
OUTPUT_COUNT = "num_output_tokens"


def is_text_model(spec: ModelSpec) -> bool:
    text_in = spec.input_by_name.get(TEXT_INPUT)
    text_out = spec.output_by_name.get(TEXT_OUTPUT)
    return (
        spec.decoupled
        and text_in is not None
        and text_in.datatype.is_bytes
        and text_out is not None
        and text_out.datatype.is_bytes
    )


def embeddings_check() -> Callable[[ModelSpec], bool] | None:
    """``serves_embeddings`` of the embeddings module, when it is installed."""
    try:
        module = importlib.import_module("inferd.frontends.openai.embeddings")
    except ImportError:
        return None
    check: Callable[[ModelSpec], bool] | None = getattr(module, "serves_embeddings", None)
    return check


class ModelCatalog:
    """The models of the engine that answer an endpoint of ``/v1``."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._embeddings = embeddings_check()

    def text_spec(self, name: str) -> ModelSpec:
        """The spec of the ready text model ``name``; 404 ``model_not_found`` otherwise."""
        spec = self._spec(name)
        if spec is None or not is_text_model(spec):
            raise model_not_found(name)
        return spec

    def _spec(self, name: str) -> ModelSpec | None:
        try:
            return self._engine.model_config(name)
        except InferdError:
            return None

    def _serves(self, spec: ModelSpec) -> bool:
        if is_text_model(spec):
            return True
        return self._embeddings is not None and bool(self._embeddings(spec))

    def version(self, name: str) -> int | None:
        """The version of ``name`` that answers a request (None: none is loaded)."""
        try:
            return self._engine.model_loaded(name)[0]
        except InferdError:
            return None

    def card(self, name: str) -> dict[str, Any]:
        try:
            created = int(self._engine.model_loaded(name)[1])
        except InferdError as exc:  # unloaded since it was listed
            raise model_not_found(name) from exc
        return {"id": name, "object": "model", "created": created, "owned_by": OWNER}

    async def list(self) -> dict[str, Any]:
        names = dict.fromkeys(
            entry.name
            for entry in await self._engine.repository_index(ready_only=True)
            if entry.state in (None, "READY")
        )
        data = []
        for name in names:
            spec = self._spec(name)
            if spec is not None and self._serves(spec):
                try:
                    data.append(self.card(name))
                except OpenAIError:
                    continue
        return {"object": "list", "data": data}

    def retrieve(self, name: str) -> dict[str, Any]:
        spec = self._spec(name)
        if spec is None or not self._serves(spec):
            raise OpenAIError(
                404,
                f"The model '{name}' does not exist",
                param="model",
                code="model_not_found",
            )
        return self.card(name)


__all__ = [
    "EXCLUDE_INPUT",
    "INPUT_COUNT",
    "LOGPROBS",
    "OUTPUT_COUNT",
    "OWNER",
    "RETURN_INPUT_COUNT",
    "RETURN_LOGPROBS",
    "RETURN_OUTPUT_COUNT",
    "SAMPLING_PARAMETERS",
    "STREAM",
    "TEXT_INPUT",
    "TEXT_OUTPUT",
    "ModelCatalog",
    "embeddings_check",
    "is_text_model",
]
