"""The one table from protocol-neutral error codes to HTTP statuses (PROTOCOL.md §1.2)."""

from __future__ import annotations

import logging
import uuid

from inferd.errors import ErrorCode, InferdError

HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.UNSUPPORTED: 501,
    ErrorCode.ALREADY_EXISTS: 400,
    ErrorCode.OVERLOADED: 503,
    ErrorCode.DEADLINE_EXCEEDED: 504,
    ErrorCode.CANCELLED: 400,
    ErrorCode.INTERNAL: 500,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.PERMISSION_DENIED: 403,
}

INTERNAL_ERROR_MESSAGE = "internal error"


class HttpStatusError(Exception):
    """A condition only the HTTP edge knows (unknown route, wrong method, body too large)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def status_for(error: InferdError) -> int:
    return HTTP_STATUS[error.code]


def describe_exception(exc: BaseException, log: logging.Logger, context: str) -> tuple[int, str]:
    """Status and client-facing message for any exception raised while serving a request.

    inferd's own errors keep their message; anything else is logged with a fresh request id
    and answered with a bare "internal error" (never a traceback).
    """
    if isinstance(exc, InferdError):
        return status_for(exc), exc.message
    if isinstance(exc, HttpStatusError):
        return exc.status, exc.message
    request_id = uuid.uuid4().hex[:12]
    log.error("unexpected error [request %s] %s", request_id, context, exc_info=exc)
    return 500, INTERNAL_ERROR_MESSAGE


__all__ = [
    "HTTP_STATUS",
    "INTERNAL_ERROR_MESSAGE",
    "HttpStatusError",
    "describe_exception",
    "status_for",
]
