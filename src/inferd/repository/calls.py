"""Calling a model in process: the repository's implementation of :class:`ModelCaller`.

One caller serves every in-process call: ensembles run their steps through it, the engine's
streaming entry and models that call other models (business-logic scripting) stream through
it. A call resolves the model version among the READY ones, checks the request against the
version's configuration and submits it to the version's own scheduler, so it batches with the
model's other traffic. Outputs come back as the arrays the model produced (no copy).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import numpy as np

from inferd.core.inference import InferRequest, InferResponse
from inferd.core.model_spec import ModelSpec
from inferd.core.streaming import ResponseBudget, StreamedResponse
from inferd.core.validation import validate_request
from inferd.errors import InvalidArgumentError
from inferd.repository.manager_types import ServingModel
from inferd.repository.streaming import StreamEvent, stream_model
from inferd.scheduling.response_cache import ResponseCache, request_key

__all__ = ["InProcessCaller", "parse_version", "submit_cached"]

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
    cache: ResponseCache,
    model: ServingModel,
    request: InferRequest,
    rows: int,
    shape: Callable[[Outputs], Outputs],
) -> Outputs:
    """Answer ``request`` from the response cache, or run it on ``model`` and store what
    ``shape`` makes of the outputs (what a caller receives), as Triton does for every request
    to a model that enables the cache: a client's request, an ensemble's step, a model's call
    of a model. A hit counts as a success and a cache hit in the model's statistics; a miss
    adds its lookup and insertion to its request time and counts a cache miss."""
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
    outputs = shape(await model.scheduler.submit(request, rows))
    start = now()
    cache.insert(key, outputs)
    model.stats.record_cache_miss(lookup_ns + now() - start)
    return outputs


def _answered(spec: ModelSpec, request: InferRequest) -> Callable[[Outputs], Outputs] | None:
    """What the engine answers to ``request`` out of a model's outputs: the configured ones when
    it names none, else the ones it names (a missing one refused as the engine refuses it).
    None when it asks for a classification, which only the engine shapes (such a request is
    never answered from the cache here)."""
    wanted = request.outputs
    if wanted is None:
        configured = tuple(t.name for t in spec.outputs)

        def every(outputs: Outputs) -> Outputs:
            return {n: outputs[n] for n in configured if n in outputs}

        return every
    if any(o.classification > 0 for o in wanted):
        return None
    names = tuple(o.name for o in wanted)

    def named(outputs: Outputs) -> Outputs:
        for n in names:
            if n not in outputs:
                raise InvalidArgumentError(
                    f"model '{spec.name}' did not produce requested output '{n}'"
                )
        return {n: outputs[n] for n in names}

    return named


def _select(request: InferRequest, outputs: Outputs) -> Outputs:
    if request.outputs is None:
        return outputs
    return {o.name: outputs[o.name] for o in request.outputs if o.name in outputs}


class InProcessCaller:
    """Runs requests on the models they name, on this server.

    ``await caller(request)`` returns every output of a model that answers once;
    ``caller.stream(request)`` yields every response (many, one or none for a decoupled model)
    with only the requested outputs. ``get`` resolves a model name and version (None: the
    latest READY one) to a serving version, raising ``NotFoundError`` as the engine does.
    Given the server's response ``cache``, a model that enables it answers these calls and
    streams (ensemble steps, models calling models) from the cache as the engine answers its
    requests, sharing their entries (a request for a classification runs uncached here).
    """

    __slots__ = ("_cache", "_get")

    def __init__(
        self,
        get: Callable[[str, int | None], ServingModel],
        cache: ResponseCache | None = None,
    ) -> None:
        self._get = get
        self._cache = cache

    async def _submit(self, model: ServingModel, request: InferRequest, rows: int) -> Outputs:
        cache = self._cache
        if cache is not None and model.spec.response_cache:
            shape = _answered(model.spec, request)
            if shape is not None:
                return await submit_cached(cache, model, request, rows, shape)
        return await model.scheduler.submit(request, rows)

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
        return await self._submit(model, request, rows)

    async def __call__(self, request: InferRequest) -> InferResponse:
        model = self.resolve(request)
        rows = validate_request(request, model.spec)
        outputs = await self._submit(model, request, rows)
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
            outputs = _select(request, await self._submit(model, request, rows))
            yield StreamEvent(
                InferResponse(name, version, outputs, request.id), None, True, name, version
            )
            return
        items = stream_model(model, request, rows, budget)
        async with contextlib.aclosing(items):
            async for item in items:
                response = None
                if item.outputs is not None:
                    outputs = _select(request, item.outputs)
                    response = InferResponse(name, version, outputs, request.id)
                yield StreamEvent(response, item.error, item.final, name, version)

    async def stream_outputs(self, request: InferRequest) -> AsyncGenerator[StreamedResponse, None]:
        """:meth:`stream` as bare outputs (for models that call models)."""
        async with contextlib.aclosing(self.stream(request)) as events:
            async for event in events:
                outputs = event.response.outputs if event.response is not None else None
                yield StreamedResponse(outputs, event.error, event.final)
