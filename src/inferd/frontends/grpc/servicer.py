"""``inference.GRPCInferenceService`` over :class:`inferd.engine.Engine` (grpc.aio).

Every RPC is an ``async def``: the service runs on the server's event loop, as the engine does.
Errors are mapped once, by :mod:`inferd.frontends.grpc.errors`, and set as the call's status
(tritonclient shows the inferd message, the status details); the handler then returns nothing.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from typing import Any

from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.codecs import statistics
from inferd.codecs.model_config import from_json_dict
from inferd.codecs.repository import decode_load_parameters, decode_unload_parameters
from inferd.codecs.v2_grpc import (
    ENABLE_EMPTY_FINAL_RESPONSE,
    decode_infer_request,
    encode_infer_response,
    model_metadata_response,
    repository_index_response,
)
from inferd.core.names import check_model_name
from inferd.core.streaming import ResponseBudget
from inferd.engine import Engine
from inferd.errors import (
    InvalidArgumentError,
    UnsupportedError,
)
from inferd.frontends.grpc.errors import set_status, status_for
from inferd.frontends.grpc.handlers import Undecodable, sees_undecodable
from inferd.frontends.grpc.streaming import (
    decoupled_responses,
    serve_stream,
    split_response_room,
)
from inferd.frontends.shared_memory import SharedMemoryRegistry

__all__ = ["GrpcInferenceServicer"]

_Failure = tuple[Any, str]  # (grpc.StatusCode, details)
_StreamResult = tuple[Any, _Failure | None]  # (ModelStreamInferResponse, failure)

_STREAM_ERRORS_AS_STATUS = "triton_grpc_error"  # metadata key: close the stream on first error


class GrpcInferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """The KServe v2 / Triton gRPC service.

    ``max_stream_inflight`` bounds the requests of one ``ModelStreamInfer`` stream that are
    being computed or waiting to be written; beyond it the stream stops reading (HTTP/2 flow
    control then pushes back on the client). ``max_stream_responses`` bounds the responses of
    one stream waiting in the server for the client to read them; beyond it a decoupled
    model's next send waits.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        log: logging.Logger,
        max_stream_inflight: int = 1024,
        max_stream_responses: int = 1024,
        shared_memory: SharedMemoryRegistry | None = None,
    ) -> None:
        if max_stream_inflight < 1:
            raise ValueError("max_stream_inflight must be >= 1")
        split_response_room(max_stream_responses)  # refuses a bound too small to split
        self._engine = engine
        self._shm = (
            shared_memory if shared_memory is not None else SharedMemoryRegistry(enabled=False)
        )
        self._log = log
        self._max_stream_inflight = max_stream_inflight
        self._max_stream_responses = max_stream_responses
        self._ids = itertools.count(1)

    # -- helpers ------------------------------------------------------------------------------

    def _request_id(self, client_id: str = "") -> str:
        rid = f"grpc-{next(self._ids)}"
        return f"{rid} (client id '{client_id}')" if client_id else rid

    @contextlib.asynccontextmanager
    async def _mapped_errors(self, context: Any, client_id: str = "") -> AsyncIterator[None]:
        """Turn an exception of the body into the call's status via the one error table; the
        exception ends there, so the RPC returns ``None`` (grpc sends the status alone)."""
        try:
            yield
        except Exception as exc:
            code, details = status_for(exc, log=self._log, request_id=self._request_id(client_id))
            set_status(context, code, details)

    async def _infer(
        self, msg: Any, *, into: Any = None, trace_context: dict[str, str] | None = None
    ) -> Any:
        request = decode_infer_request(msg, self._shm)
        # consumed here: it only shapes how a decoupled stream ends, it is not a model parameter
        request.parameters.pop(ENABLE_EMPTY_FINAL_RESPONSE, None)
        request.trace_context = trace_context
        response = await self._engine.infer(request)
        return encode_infer_response(response, into=into, request=request)

    # -- health and metadata ------------------------------------------------------------------

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerLiveResponse(live=self._engine.is_live())

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerReadyResponse(ready=self._engine.is_ready())

    async def ModelReady(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            # unknown or unloaded models answer OK with ready=false (tritonclient raises
            # otherwise); a name that cannot be a model's is refused
            ready = self._engine.model_ready(check_model_name(request.name), request.version)
            return service_pb2.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        meta = self._engine.server_metadata()
        return service_pb2.ServerMetadataResponse(
            name=meta.name, version=meta.version, extensions=list(meta.extensions)
        )

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            name = check_model_name(request.name)
            await self._engine.ensure_model(name, request.version)  # on-demand mode loads it
            meta = self._engine.model_metadata(name, request.version)
            return model_metadata_response(meta)

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            name = check_model_name(request.name)
            await self._engine.ensure_model(name, request.version)  # on-demand mode loads it
            spec = self._engine.model_config(name, request.version)
            return service_pb2.ModelConfigResponse(config=from_json_dict(spec.config))

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            if request.name:  # no name: every model
                check_model_name(request.name)
            snapshots = self._engine.model_statistics(request.name, request.version)
            return statistics.to_proto(snapshots)

    # -- inference ----------------------------------------------------------------------------

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        # the hot path: errors mapped by hand rather than by the context manager's generator
        try:
            infer = decode_infer_request(request, self._shm)
            infer.parameters.pop(ENABLE_EMPTY_FINAL_RESPONSE, None)
            if self._engine.tracing:
                infer.trace_context = _trace_context(context)
            return encode_infer_response(await self._engine.infer(infer), request=infer)
        except Exception as exc:
            code, details = status_for(exc, log=self._log, request_id=self._request_id(request.id))
            set_status(context, code, details)
            return None

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterable[Any], context: Any
    ) -> AsyncIterator[Any]:
        """Requests of one stream run concurrently; each response is written when it is
        ready (see :mod:`inferd.frontends.grpc.streaming` for the order and the bounds).

        A failed request yields ``error_message`` with an ``infer_response`` carrying only the
        request id, and the stream stays open (unless the client sent the metadata
        ``triton_grpc_error: true``, which closes the stream with the error's status instead).
        While the server traces, every request of the stream continues the trace context the
        stream's metadata carries.
        """
        errors_as_status = any(
            key == _STREAM_ERRORS_AS_STATUS and str(value).lower() == "true"
            for key, value in (context.invocation_metadata() or ())
        )
        trace_context = _trace_context(context) if self._engine.tracing else None
        results = serve_stream(
            request_iterator,
            functools.partial(self._stream_answer, trace_context=trace_context),
            max_inflight=self._max_stream_inflight,
            max_responses=self._max_stream_responses,
        )
        async with contextlib.aclosing(results):
            async for response, failure in results:
                if failure is not None and errors_as_status:
                    set_status(context, *failure)
                    return
                yield response

    def _stream_answer(
        self, msg: Any, budget: ResponseBudget, trace_context: dict[str, str] | None = None
    ) -> tuple[bool, AsyncGenerator[_StreamResult, None]]:
        """Whether the answer to ``msg`` keeps request order (an ordinary model's), and its
        responses."""
        if type(msg) is not Undecodable and self._engine.is_decoupled(
            msg.model_name, msg.model_version
        ):
            responses = decoupled_responses(
                self._engine, msg, self._shm, self._stream_failure, budget, trace_context
            )
            return False, responses
        return True, self._stream_one(msg, trace_context)

    async def _stream_one(
        self, msg: Any, trace_context: dict[str, str] | None
    ) -> AsyncGenerator[_StreamResult, None]:
        out = service_pb2.ModelStreamInferResponse()
        try:
            if type(msg) is Undecodable:
                raise InvalidArgumentError(msg.message)
            await self._infer(msg, into=out.infer_response, trace_context=trace_context)
        except Exception as exc:
            yield self._stream_failure(msg, exc)
            return
        yield out, None

    def _stream_failure(self, msg: Any, exc: Exception) -> _StreamResult:
        code, details = status_for(exc, log=self._log, request_id=self._request_id(msg.id))
        out = service_pb2.ModelStreamInferResponse(error_message=details)
        out.infer_response.id = msg.id
        return out, (code, details)

    # -- model repository ---------------------------------------------------------------------

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            entries = await self._engine.repository_index(ready_only=request.ready)
            return repository_index_response(entries)

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            _reject_repository_name(request.repository_name)
            load = decode_load_parameters(_repository_parameters(request), files_as="bytes")
            await self._engine.load_model(
                check_model_name(request.model_name),
                config_json=load.config_json,
                files=load.files,
            )
            return service_pb2.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            _reject_repository_name(request.repository_name)
            unload_dependents = decode_unload_parameters(_repository_parameters(request))
            await self._engine.unload_model(
                check_model_name(request.model_name), unload_dependents=unload_dependents
            )
            return service_pb2.RepositoryModelUnloadResponse()

    # -- shared memory (CUDA: as a server without GPUs) ---------------------------------------

    @sees_undecodable
    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            _shm_request(self._shm, request, status=True)
            response = service_pb2.SystemSharedMemoryStatusResponse()
            for region in self._shm.status(request.name):
                entry = response.regions[region.name]
                entry.name = region.name
                entry.key = region.key
                entry.offset = region.offset
                entry.byte_size = region.byte_size
            return response

    @sees_undecodable
    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            _shm_request(self._shm, request)
            self._shm.register(request.name, request.key, request.offset, request.byte_size)
            return service_pb2.SystemSharedMemoryRegisterResponse()

    @sees_undecodable
    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            _shm_request(self._shm, request)
            self._shm.unregister(request.name)
            return service_pb2.SystemSharedMemoryUnregisterResponse()

    @sees_undecodable
    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            _shm_request(self._shm, request, status=True)
            self._shm.cuda_status(request.name)  # empty, or an error naming the region
            return service_pb2.CudaSharedMemoryStatusResponse()

    @sees_undecodable
    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            _shm_request(self._shm, request)
            self._shm.cuda_register(request.name)
            return service_pb2.CudaSharedMemoryRegisterResponse()

    @sees_undecodable
    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            _shm_request(self._shm, request)
            self._shm.cuda_unregister(request.name)
            return service_pb2.CudaSharedMemoryUnregisterResponse()

    # -- trace, logging (not supported yet) ---------------------------------------------------

    async def TraceSetting(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            raise UnsupportedError("the trace extension is not implemented by this server")

    async def LogSettings(self, request: Any, context: Any) -> Any:
        async with self._mapped_errors(context):
            raise UnsupportedError("the logging extension is not implemented by this server")


def _trace_context(context: Any) -> dict[str, str]:
    """The caller's W3C trace context (``traceparent``, ``tracestate`` metadata)."""
    return {
        key: value
        for key, value in (context.invocation_metadata() or ())
        if key in ("traceparent", "tracestate") and isinstance(value, str)
    }


def _reject_repository_name(name: str) -> None:
    if name:
        raise UnsupportedError(
            f"'repository_name' specification is not supported (got '{name}'): models are "
            "addressed by name across all repositories"
        )


def _repository_parameters(request: Any) -> dict[str, object]:
    """A load or unload request's ``ModelRepositoryParameter`` map as plain values (``None``
    for a parameter that carries no value), for the checks every front end shares."""
    values: dict[str, object] = {}
    for key in request.parameters:
        param = request.parameters[key]
        kind = param.WhichOneof("parameter_choice")
        values[key] = None if kind is None else getattr(param, kind)
    return values


def _shm_request(registry: SharedMemoryRegistry, request: Any, *, status: bool = False) -> None:
    """While the extension is off, every shared-memory RPC but the status queries (which answer
    as for a server with no region, as Triton does) answers UNIMPLEMENTED naming the flag, even
    one whose message does not parse; otherwise a message that does not parse is the client's
    error."""
    if not status:
        registry.check_enabled()
    if type(request) is Undecodable:
        raise InvalidArgumentError(request.message)
