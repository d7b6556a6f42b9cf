"""How the server dispatches each RPC: message parsing, API group and access check.

The handlers are built once, when the server starts, from the service descriptors. Every RPC
belongs to one of Triton's restricted-API groups (:data:`API_BY_METHOD`); only the RPCs whose
group the :class:`~inferd.frontends.access.AccessPolicy` guards get a check of the call's
metadata, so an unguarded RPC pays nothing for access control.

A request that does not parse as its protobuf message is the client's error: the deserializer
returns an :class:`Undecodable` in its place and the RPC answers INVALID_ARGUMENT (grpcio
itself would answer UNKNOWN and log a traceback). Refusals set the call's status and return
(:func:`~inferd.frontends.grpc.errors.set_status`), as the servicer does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from types import MappingProxyType, ModuleType
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from inferd.errors import PermissionDeniedError, UnauthenticatedError
from inferd.frontends.access import AccessPolicy, Api
from inferd.frontends.grpc.errors import STATUS_BY_CODE, set_status

__all__ = [
    "API_BY_METHOD",
    "HEALTH_API_BY_METHOD",
    "Undecodable",
    "restricted_message",
    "sees_undecodable",
    "service_handler",
]

API_BY_METHOD: Mapping[str, Api] = MappingProxyType(
    {
        "ServerLive": Api.HEALTH,
        "ServerReady": Api.HEALTH,
        "ModelReady": Api.HEALTH,
        "ServerMetadata": Api.METADATA,
        "ModelMetadata": Api.METADATA,
        "ModelInfer": Api.INFERENCE,
        "ModelStreamInfer": Api.INFERENCE,
        "ModelConfig": Api.MODEL_CONFIG,
        "ModelStatistics": Api.STATISTICS,
        "RepositoryIndex": Api.MODEL_REPOSITORY,
        "RepositoryModelLoad": Api.MODEL_REPOSITORY,
        "RepositoryModelUnload": Api.MODEL_REPOSITORY,
        "SystemSharedMemoryStatus": Api.SHARED_MEMORY,
        "SystemSharedMemoryRegister": Api.SHARED_MEMORY,
        "SystemSharedMemoryUnregister": Api.SHARED_MEMORY,
        "CudaSharedMemoryStatus": Api.SHARED_MEMORY,
        "CudaSharedMemoryRegister": Api.SHARED_MEMORY,
        "CudaSharedMemoryUnregister": Api.SHARED_MEMORY,
        "TraceSetting": Api.TRACE,
        "LogSettings": Api.LOGGING,
    }
)

#: ``grpc.health.v1.Health``: part of the health group, as in Triton
HEALTH_API_BY_METHOD: Mapping[str, Api] = MappingProxyType(
    {"Check": Api.HEALTH, "Watch": Api.HEALTH}
)


class Undecodable:
    """Stands for a request message that did not parse; ``message`` says which and why."""

    __slots__ = ("message",)

    id = ""  # read like a request's id where a stream reports a failed request

    def __init__(self, message: str) -> None:
        self.message = message


def _deserializer(cls: Any) -> Callable[[bytes], Any]:
    parse = cls.FromString
    name = cls.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as exc:
            return Undecodable(f"the request is not a valid '{name}' message: {exc}")

    return deserialize


# Triton's gRPC front end expects a restriction's KEY as the metadata key with this prefix
RESTRICTED_PREFIX = "triton-grpc-protocol-"


def restricted_message(key: str) -> str:
    """What a call to a restricted group without its metadata is told (Triton's words)."""
    return f"This protocol is restricted, expecting header '{RESTRICTED_PREFIX}{key}'"


def _checker(access: AccessPolicy, api: Api) -> Callable[[Any], bool]:
    """A check of one call's metadata against the policy for ``api``: true if the call may
    proceed, else false with the call's status set. A restriction's ``KEY`` is read from the
    metadata ``triton-grpc-protocol-KEY`` (Triton's, what ``tritonclient`` users send) or,
    as inferd's earlier releases read it, ``KEY`` itself."""
    restriction = next((r for r in access.restrictions if api in r.apis), None)
    key = "" if restriction is None else restriction.shown_key
    denied = restricted_message(key)

    def check(context: Any) -> bool:
        metadata = context.invocation_metadata() or ()

        def find(name: str) -> str | None:
            for item_key, value in metadata:
                if item_key == name and isinstance(value, str):
                    return value
            return None

        def lookup(name: str) -> str | None:
            if restriction is not None and name == restriction.key:
                prefixed = find(RESTRICTED_PREFIX + name)
                if prefixed is not None:
                    return prefixed
            return find(name)

        try:
            access.check(api, lookup)
        except PermissionDeniedError as exc:
            # PERMISSION_DENIED from the one table (Triton answers UNAVAILABLE, which clients
            # retry as if the server were busy); a restriction's message keeps Triton's words
            set_status(context, STATUS_BY_CODE[exc.code], denied if key else exc.message)
            return False
        except UnauthenticatedError as exc:
            set_status(context, STATUS_BY_CODE[exc.code], exc.message)
            return False
        return True

    return check


def _refuse(request: Undecodable, context: Any) -> None:
    set_status(context, grpc.StatusCode.INVALID_ARGUMENT, request.message)


def sees_undecodable(behavior: Any) -> Any:
    """Mark a unary RPC of the servicer that receives an :class:`Undecodable` request itself
    instead of the INVALID_ARGUMENT answer (so a check it makes first, such as "the shared-memory
    extension is off", wins over the parse error)."""
    behavior.sees_undecodable = True
    return behavior


def _unary_behavior(behavior: Any, check: Callable[[Any], bool] | None) -> Any:
    if getattr(behavior, "sees_undecodable", False):
        if check is None:
            return behavior

        async def guarded_raw(request: Any, context: Any) -> Any:
            if not check(context):
                return None
            return await behavior(request, context)

        return guarded_raw
    if check is None:

        async def unary(request: Any, context: Any) -> Any:
            if type(request) is Undecodable:
                return _refuse(request, context)
            return await behavior(request, context)

        return unary

    async def guarded_unary(request: Any, context: Any) -> Any:
        if not check(context):
            return None
        if type(request) is Undecodable:
            return _refuse(request, context)
        return await behavior(request, context)

    return guarded_unary


def _streaming_behavior(behavior: Any, check: Callable[[Any], bool] | None, decoded: bool) -> Any:
    """Server-streaming RPCs. ``decoded`` is false when the request is a single message that
    may be :class:`Undecodable`; with a request stream, the servicer sees each message."""
    if check is None and decoded:
        return behavior

    async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
        if check is not None and not check(context):
            return
        if not decoded and type(request) is Undecodable:
            _refuse(request, context)
            return
        async for response in behavior(request, context):
            yield response

    return streaming


def service_handler(
    module: ModuleType,
    service: str,
    servicer: Any,
    apis: Mapping[str, Api],
    access: AccessPolicy,
) -> grpc.GenericRpcHandler:
    """The handler of ``service`` (declared in the generated ``module``) over ``servicer``.

    Raises ``ValueError`` for a method of the service that ``apis`` does not place in a group:
    every RPC must be in one.
    """
    descriptor = module.DESCRIPTOR.services_by_name[service]
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in descriptor.methods:
        api = apis.get(method.name)
        if api is None:
            raise ValueError(f"RPC {service}/{method.name} belongs to no API group")
        check = _checker(access, api) if access.guards(api) else None
        behavior = getattr(servicer, method.name)
        request = _deserializer(getattr(module, method.input_type.name))
        response = getattr(module, method.output_type.name).SerializeToString
        if method.client_streaming and method.server_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                _streaming_behavior(behavior, check, decoded=True),
                request_deserializer=request,
                response_serializer=response,
            )
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _streaming_behavior(behavior, check, decoded=False),
                request_deserializer=request,
                response_serializer=response,
            )
        elif not method.client_streaming:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary_behavior(behavior, check),
                request_deserializer=request,
                response_serializer=response,
            )
        else:
            raise ValueError(f"RPC {service}/{method.name}: client streaming is not served")
    return grpc.method_handlers_generic_handler(descriptor.full_name, handlers)
