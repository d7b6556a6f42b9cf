"""The one table from inferd error codes to gRPC status codes.

tritonclient turns a non-OK status into ``InferenceServerException(msg=details(),
status=str(code()))``, so the details carry the inferd message verbatim. Errors that are not
:class:`~inferd.errors.InferdError` are bugs: they are logged with a request id and answered
INTERNAL "internal error", never with a traceback.

A failed call gets its status through :func:`set_status`, never ``context.abort``: grpc.aio keeps
the ``AbortError`` that ``abort`` raises on the call's state, and the error's traceback holds the
handler's frames, so every aborted call leaves a reference cycle that keeps its request (raw
tensor data included, up to the message size limit) alive until the garbage collector next runs.
The collector counts objects, not bytes, so after a burst of large refused requests the server's
memory stayed hundreds of megabytes higher.
"""

from __future__ import annotations

import logging
from types import MappingProxyType
from typing import Any

import grpc

from inferd.errors import ErrorCode, InferdError

__all__ = ["INTERNAL_ERROR_MESSAGE", "STATUS_BY_CODE", "set_status", "status_for"]

INTERNAL_ERROR_MESSAGE = "internal error"

STATUS_BY_CODE = MappingProxyType(
    {
        ErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
        ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
        ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
        ErrorCode.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
        ErrorCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
        # Triton answers a full queue with UNAVAILABLE; clients retry on it.
        ErrorCode.OVERLOADED: grpc.StatusCode.UNAVAILABLE,
        ErrorCode.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
        ErrorCode.CANCELLED: grpc.StatusCode.CANCELLED,
        ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
        ErrorCode.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
        ErrorCode.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    }
)


def status_for(
    exc: Exception, *, log: logging.Logger, request_id: str
) -> tuple[grpc.StatusCode, str]:
    """The status and details to answer ``exc`` with; unknown errors are logged here."""
    if isinstance(exc, InferdError):
        return STATUS_BY_CODE[exc.code], exc.message
    log.error("request %s failed with an unexpected error", request_id, exc_info=exc)
    return grpc.StatusCode.INTERNAL, INTERNAL_ERROR_MESSAGE


def set_status(context: Any, code: grpc.StatusCode, details: str) -> None:
    """End the call with ``code`` and ``details`` when its handler returns (see the module's
    notes for why not ``context.abort``). A unary handler then returns ``None``; a streaming
    handler stops yielding."""
    context.set_code(code)
    context.set_details(details)
