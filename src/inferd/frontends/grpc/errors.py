"""The one table from inferd error codes to gRPC status codes.

tritonclient turns a non-OK status into ``InferenceServerException(msg=details(),
status=str(code()))``, so the details carry the inferd message verbatim. Errors that are not
:class:`~inferd.errors.InferdError` are bugs: they are logged with a request id and answered
INTERNAL "internal error", never with a traceback.
"""

from __future__ import annotations

import logging
from types import MappingProxyType

import grpc

from inferd.errors import ErrorCode, InferdError

__all__ = ["INTERNAL_ERROR_MESSAGE", "STATUS_BY_CODE", "status_for"]

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
