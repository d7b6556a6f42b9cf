"""Calling a model in process: the repository's implementation of :class:`ModelCaller`.

One caller serves every in-process call: the engine answers its requests through it
(:meth:`InProcessCaller.run`, then :func:`respond`), ensembles run their steps through it, the
engine's streaming entry and models that call other models (business-logic scripting) stream
through it. A call resolves the model version among the READY ones, checks the request against
the version's configuration and submits it to the version's own scheduler (or answers it from
the response cache), so it batches with the model's other traffic. Outputs come back as the
arrays the model produced (no copy); responses are shaped from them once, by :func:`respond`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import numpy as np

from inferd.core.inference import InferRequest, InferResponse
from inferd.core.model_spec import ModelSpec
from inferd.core.shaping import shape_outputs
from inferd.core.streaming import ResponseBudget, StreamedResponse
from inferd.core.validation import validate_request
from inferd.errors import InvalidArgumentError
from inferd.repository.manager_types import ServingModel
from inferd.repository.streaming import StreamEvent, stream_model
from inferd.scheduling.response_cache import ResponseCache, request_key

__all__ = ["InProcessCaller", "parse_version", "respond", "submit_cached"]

Outputs = dict[str, np.ndarray[Any, Any]]


def parse_version(version: str) -> int | None:
    """``""`` means the latest ready version; anything else must be an integer > 0."""
    if not version:
        return None
    try:
        value = int(version)
    except ValueError:
        value = 0
    if value <= 0 or not version.isdigit():
        raise InvalidArgumentError(
            f"failed to get model version from specified version string '{version}' "
            "(details: not an integer), version should be an integral value > 0"
        )
    return value


async def submit_cached(
    cache: ResponseCache, model: ServingModel, request: InferRequest, rows: int
) -> Outputs:
    """The raw outputs of ``model`` for ``request``: from the response cache, or by running
    it and storing every output the model produced, as Triton does for every request to a
    model that enables the cache: a client's request, an ensemble's step, a model's call of a
    model. The key is the request's inputs and parameters, not the outputs it asks for, so a
    miss runs the model for all of its outputs and every selection or ``class_count`` of the
    same inputs is shaped from the one entry (:func:`respond`). A hit counts as a success and
    a cache hit in the model's statistics; a miss adds its lookup and insertion to its request
    time and counts a cache miss."""
    now = time.monotonic_ns
    start = now()
    key = request_key(request, model.spec.name, model.version, model.cache_epoch)
    outputs = cache.lookup(key)
    if outputs is not None:
        took = now() - start
        model.stats.record_cache_hit(took, 0, took)
        # a hit never waits: give the loop a turn, or a caller hitting in a loop starves it
        await asyncio.sleep(0)
        return outputs
    lookup_ns = now() - start
    every = request if request.outputs is None else dataclasses.replace(request, outputs=None)
    outputs = await model.scheduler.submit(every, rows)
    start = now()
    cache.insert(key, outputs)
    model.stats.record_cache_miss(lookup_ns + now() - start)
    return outputs


def respond(
    model: ServingModel, request: InferRequest, outputs: Outputs, *, strict: bool = True
) -> InferResponse:
    """The response to ``request`` out of the raw ``outputs`` of ``model``: shaped once, here
    (selection and classification, :func:`inferd.core.shaping.shape_outputs`)."""
    return InferResponse(
        model_name=model.spec.name,
        model_version=str(model.version),
        outputs=shape_outputs(request, model.spec, outputs, model.labels, strict=strict),
        id=request.id,
    )


class InProcessCaller:
    """Runs requests on the models they name, on this server.

    ``await caller(request)`` returns every output of a model that answers once;
    ``caller.stream(request)`` yields every response (many, one or none for a decoupled model)
    shaped as the request asks (its outputs, their classification). ``get`` resolves a model
    name and version (None: the latest READY one) to a serving version, raising
    ``NotFoundError`` as the engine does. Given the server's response ``cache``, a model that
    enables it answers these calls and streams (ensemble steps, models calling models) from
    the cache as the engine answers its requests, sharing their entries (:meth:`run`).
    """

    __slots__ = ("_cache", "_get")

    def __init__(
        self,
        get: Callable[[str, int | None], ServingModel],
        cache: ResponseCache | None = None,
    ) -> None:
        self._get = get
        self._cache = cache

    def run(self, model: ServingModel, request: InferRequest, rows: int) -> Awaitable[Outputs]:
        """The raw outputs of ``model`` for the checked ``request`` (``rows`` rows): from the
        response cache when the model enables it, else from its scheduler. The one
        cache-or-submit step of the engine and of every in-process call; a plain awaitable, so
        the uncached path adds no coroutine of its own."""
        cache = self._cache
        if cache is not None and model.spec.response_cache:
            return submit_cached(cache, model, request, rows)
        return model.scheduler.submit(request, rows)

    def resolve(self, request: InferRequest) -> ServingModel:
        return self._get(request.model_name, parse_version(request.model_version))

    async def outputs(
        self,
        request: InferRequest,
        version: int | None,
        checked: ModelSpec | None = None,
        rows: int = 1,
    ) -> Outputs:
        model = self._get(request.model_name, version)
        if checked is None or model.spec is not checked:
            rows = validate_request(request, model.spec)
        return await self.run(model, request, rows)

    async def __call__(self, request: InferRequest) -> InferResponse:
        model = self.resolve(request)
        rows = validate_request(request, model.spec)
        outputs = await self.run(model, request, rows)
        return InferResponse(
            model_name=model.spec.name,
            model_version=str(model.version),
            outputs=outputs,
            id=request.id,
        )

    async def stream(
        self,
        request: InferRequest,
        model: ServingModel | None = None,
        budget: ResponseBudget | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Every response of the model to ``request``, the last one final. Closing the
        iterator early cancels the request (the model sees it). A ``budget`` bounds the
        responses a decoupled model may send ahead of this iterator (see ``stream_model``)."""
        if model is None:
            model = self.resolve(request)
        rows = validate_request(request, model.spec)
        name, version = model.spec.name, str(model.version)
        if self._cache is not None and model.spec.response_cache:
            # a model that enables the cache is never decoupled (refused at load): one answer,
            # from the cache or stored in it, as for the same request outside a stream
            answer = respond(model, request, await self.run(model, request, rows))
            yield StreamEvent(answer, None, True, name, version)
            return
        strict = not model.spec.decoupled
        items = stream_model(model, request, rows, budget)
        async with contextlib.aclosing(items):
            async for item in items:
                response = None
                if item.outputs is not None:
                    # a decoupled model's response may carry only some of its outputs
                    response = respond(model, request, item.outputs, strict=strict)
                yield StreamEvent(response, item.error, item.final, name, version)

    async def stream_outputs(self, request: InferRequest) -> AsyncGenerator[StreamedResponse, None]:
        """:meth:`stream` as bare outputs (for models that call models)."""
        async with contextlib.aclosing(self.stream(request)) as events:
            async for event in events:
                outputs = event.response.outputs if event.response is not None else None
                yield StreamedResponse(outputs, event.error, event.final)
