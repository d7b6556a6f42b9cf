"""The facade every front end (HTTP, gRPC, in-process) talks to.

The engine resolves a model version through the repository manager, checks the request against
the model's configuration, hands it to that version's scheduler (or the response cache), shows
the raw outputs to its observers and only then shapes the response (requested-output subset,
classification: ``inferd.core.shaping``, through ``repository.calls.respond``). It knows no
wire format.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import numpy as np

from inferd.core.inference import InferRequest, InferResponse
from inferd.core.metadata import IndexEntry, ModelMetadata, ServerMetadata, TensorMetadata
from inferd.core.model_spec import ModelSpec
from inferd.core.observe import InferenceObserver
from inferd.core.routing import ModelRoute, Router
from inferd.core.statistics import StatsSnapshot
from inferd.core.streaming import ResponseBudget
from inferd.core.tracing import RequestTrace, RequestTracer
from inferd.core.validation import validate_request
from inferd.errors import InferdError, UnavailableError, UnsupportedError
from inferd.repository.calls import InProcessCaller, parse_version, respond
from inferd.repository.manager_types import ModelManager, ServingModel
from inferd.repository.rollback import Pin
from inferd.repository.streaming import StreamEvent
from inferd.scheduling.response_cache import ResponseCache

log = logging.getLogger(__name__)

SERVER_NAME = "triton"  # tritonclient examples check that the server calls itself "triton"

EXTENSIONS: tuple[str, ...] = (
    "classification",
    "model_repository",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "schedule_policy",
    "generate",
)


class Engine:
    """One engine per server; safe to share between front ends on the same event loop."""

    def __init__(
        self,
        manager: ModelManager,
        *,
        server_version: str,
        strict_readiness: bool = True,
        extensions: tuple[str, ...] = EXTENSIONS,
        response_cache: ResponseCache | None = None,
        observers: Sequence[InferenceObserver] = (),
        tracer: RequestTracer | None = None,
        router: Router | None = None,
    ) -> None:
        self._manager = manager
        # model name -> its traffic policy; the router's own mapping, empty without one
        self._routes: Mapping[str, ModelRoute] = router.routes if router is not None else {}
        if router is not None:
            router.attach(self._run_target)
        self._observers = tuple(observers)
        self._tracer = tracer
        # front ends read the callers' trace context only while this is true
        self.tracing = tracer is not None
        # the one cache-or-submit path (run) and the streaming entry
        self._calls = InProcessCaller(manager.get, response_cache)
        self._metadata = ServerMetadata(SERVER_NAME, server_version, extensions)
        self._strict_readiness = strict_readiness
        self._accepting = True

    # -- health and metadata ------------------------------------------------------------------

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        if not self._accepting:
            return False
        if self._strict_readiness:
            return self._manager.all_ready()
        return True

    def load_failures(self) -> dict[str, int]:
        """Failed model loads per model name since the server started."""
        return self._manager.load_failures()

    def stop_accepting(self) -> None:
        """First stage of shutdown: report not ready and refuse new inference requests."""
        self._accepting = False

    def server_metadata(self) -> ServerMetadata:
        return self._metadata

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            self._manager.get(name, parse_version(version))
        except InferdError:
            return False
        return True

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        wanted = parse_version(version)
        model = self._manager.get(name, wanted)
        spec = model.spec
        versions = (
            [str(wanted)]
            if wanted is not None
            else [str(v) for v in self._manager.ready_versions(name)]
        )
        mbs = spec.max_batch_size
        return ModelMetadata(
            name=spec.name,
            versions=versions,
            platform=spec.metadata_platform,
            inputs=[
                TensorMetadata(t.name, t.datatype.name, t.full_shape(mbs)) for t in spec.inputs
            ],
            outputs=[
                TensorMetadata(t.name, t.datatype.name, t.full_shape(mbs)) for t in spec.outputs
            ],
        )

    def model_loaded(self, name: str, version: str = "") -> tuple[int, float]:
        """The version a request for ``name`` gets (or ``version``) and when that load was
        made, in Unix seconds."""
        model = self._manager.get(name, parse_version(version))
        return model.version, model.loaded_at_s

    async def ensure_model(self, name: str, version: str = "") -> None:
        """Return once ``name`` (``version``) is loaded: in on-demand mode a model that is not
        loaded loads first (a 503 says it is loading when that takes longer than the wait);
        otherwise, and for a model that is not in the repository, the unknown-model error."""
        await self._manager.acquire(name, parse_version(version))

    def model_config(self, name: str, version: str = "") -> ModelSpec:
        """The normalised configuration: ``spec.config`` is its JSON rendering."""
        return self._manager.get(name, parse_version(version)).spec

    # -- inference ----------------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        if self._tracer is not None and request.trace is None:
            trace = self._tracer.begin(request)
            if trace is not None:
                return await self._infer_traced(request, trace, self._tracer)
        if not self._accepting:
            raise UnavailableError("the server is shutting down and accepts no new requests")
        if not request.model_version:  # a traffic policy routes requests that name no version
            route = self._routes.get(request.model_name)
            if route is not None:
                return await self._infer_routed(request, route)
        # on-demand mode loads the model first when it is not loaded (a 503 while it loads)
        model = await self._manager.acquire(
            request.model_name, parse_version(request.model_version)
        )
        return (await self._serve(request, model))[0]

    async def _serve(
        self, request: InferRequest, model: ServingModel
    ) -> tuple[InferResponse, Mapping[str, np.ndarray[Any, Any]]]:
        """Run ``request`` on ``model``: the response, and the outputs the model produced."""
        if model.spec.decoupled:
            raise UnsupportedError(
                f"model '{model.spec.name}' is decoupled (it sends any number of responses per "
                "request): call it through the gRPC stream (ModelStreamInfer)"
            )
        rows = validate_request(request, model.spec)
        outputs = await self._calls.run(model, request, rows)  # from the cache or the model
        if self._observers:  # the raw outputs, before any selection or classification
            self._notify(model, request, outputs)
        return respond(model, request, outputs), outputs

    async def _infer_routed(self, request: InferRequest, route: ModelRoute) -> InferResponse:
        """The version the model's traffic policy chooses answers; the policy hears how it
        went. The response names the variant in its ``variant`` parameter."""
        call = route.route(request)
        try:
            model = self._manager.get(call.model, call.version)
            response, outputs = await self._serve(request, model)
        except BaseException as exc:
            call.failed(exc)
            raise
        call.answered(outputs)
        response.parameters["variant"] = call.variant
        return response

    async def _run_target(
        self, request: InferRequest, name: str, version: int | None, observe: bool
    ) -> Mapping[str, np.ndarray[Any, Any]]:
        """A policy's background request (a shadow's copy, a canary's comparison): no routing,
        no response cache; the observers see it only when ``observe``."""
        model = self._manager.get(name, version)
        rows = validate_request(request, model.spec)
        outputs = await model.scheduler.submit(request, rows)
        if observe and self._observers:
            self._notify(model, request, outputs)
        return outputs

    async def _infer_traced(
        self, request: InferRequest, trace: RequestTrace, tracer: RequestTracer
    ) -> InferResponse:
        request.trace = trace
        try:
            response = await self.infer(request)
        except BaseException as exc:
            if isinstance(exc, InferdError):  # answered with the error
                tracer.responded(trace, True, exc)
            tracer.end(trace, request.model_version, exc)
            raise
        tracer.responded(trace, True, None)
        tracer.end(trace, response.model_version, None)
        return response

    def _notify(
        self,
        model: ServingModel,
        request: InferRequest,
        outputs: Mapping[str, np.ndarray[Any, Any]],
    ) -> None:
        """Hand an answered request to every observer; an observer's failure is logged and
        never reaches the request."""
        for observer in self._observers:
            try:
                observer.observe(model.spec, model.version, request, outputs)
            except Exception:
                log.exception("observer %r failed on a request to '%s'", observer, model.spec.name)

    async def stream_infer(
        self, request: InferRequest, budget: ResponseBudget | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """Every response of the model to ``request``: many, one or none for a decoupled
        model, exactly one for any other; the last event is ``final``. Closing the iterator
        early cancels the request (the model sees it). A ``budget`` (one per client stream)
        bounds the responses a decoupled model may send ahead of this iterator."""
        trace = None
        if self._tracer is not None and request.trace is None:
            trace = self._tracer.begin(request)
        if trace is None or self._tracer is None:
            events = self._stream_events(request, budget)
        else:
            events = self._stream_traced(request, budget, trace, self._tracer)
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

    async def _stream_events(
        self, request: InferRequest, budget: ResponseBudget | None
    ) -> AsyncGenerator[StreamEvent, None]:
        if not self._accepting:
            raise UnavailableError("the server is shutting down and accepts no new requests")
        # on-demand mode loads the model first when it is not loaded
        model = await self._manager.acquire(
            request.model_name, parse_version(request.model_version)
        )
        events = self._calls.stream(request, model, budget)
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

    async def _stream_traced(
        self,
        request: InferRequest,
        budget: ResponseBudget | None,
        trace: RequestTrace,
        tracer: RequestTracer,
    ) -> AsyncGenerator[StreamEvent, None]:
        """:meth:`stream_infer` noting each response in ``trace``; left before its final
        response (the caller closed the stream), the request ends as cancelled."""
        request.trace = trace
        version, final = request.model_version, False
        failure: BaseException | None = None
        try:
            events = self._stream_events(request, budget)
            async with contextlib.aclosing(events):
                async for event in events:
                    empty = event.response is None and event.error is None
                    tracer.responded(trace, event.final, event.error, empty)
                    version, final = event.model_version, event.final
                    if event.error is not None:
                        failure = event.error
                    yield event
        except BaseException as exc:
            if not final:
                failure = exc
            raise
        finally:
            tracer.end(trace, version, failure)

    def is_decoupled(self, name: str, version: str = "") -> bool:
        """The model may send any number of responses per request (False if unknown)."""
        try:
            return self._manager.get(name, parse_version(version)).spec.decoupled
        except InferdError:
            return False

    # -- statistics ---------------------------------------------------------------------------

    def model_statistics(self, name: str = "", version: str = "") -> list[StatsSnapshot]:
        return self._manager.statistics(name, parse_version(version))

    # -- repository ---------------------------------------------------------------------------

    async def repository_index(self, ready_only: bool = False) -> list[IndexEntry]:
        return await self._manager.index(ready_only=ready_only)

    async def load_model(
        self,
        name: str,
        *,
        config_json: str | None = None,
        files: dict[str, bytes] | None = None,
    ) -> None:
        await self._manager.load(name, config_json=config_json, files=files)

    async def unload_model(self, name: str, *, unload_dependents: bool = False) -> None:
        await self._manager.unload(name, unload_dependents=unload_dependents)

    async def rollback_model(self, name: str, version: int | None = None) -> Pin:
        """Pin an earlier (or the named) version as the model's default version."""
        return await self._manager.rollback(name, version)

    async def unpin_model(self, name: str) -> None:
        """Lift a rollback's pin: the model's version policy applies again."""
        await self._manager.unpin(name)
