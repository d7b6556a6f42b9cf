"""The one exception tree of inferd.

Every error carries a protocol-neutral :class:`ErrorCode`. The HTTP and gRPC front ends each map
codes to statuses in a single table; nothing below them knows about status codes.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    OVERLOADED = "OVERLOADED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"
    INTERNAL = "INTERNAL"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"


class InferdError(Exception):
    """Base of every error inferd raises on purpose."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidArgumentError(InferdError):
    """The request (or a config, or a file) is malformed or does not fit the model."""

    code = ErrorCode.INVALID_ARGUMENT


InvalidInputError = InvalidArgumentError


class NotFoundError(InferdError):
    code = ErrorCode.NOT_FOUND


class UnavailableError(InferdError):
    code = ErrorCode.UNAVAILABLE


class UnsupportedError(InferdError):
    code = ErrorCode.UNSUPPORTED


class AlreadyExistsError(InferdError):
    code = ErrorCode.ALREADY_EXISTS


class OverloadedError(InferdError):
    """Admission control refused the request (queue full, server shutting down)."""

    code = ErrorCode.OVERLOADED


class DeadlineExceededError(InferdError):
    code = ErrorCode.DEADLINE_EXCEEDED


class RequestCancelledError(InferdError):
    code = ErrorCode.CANCELLED


class UnauthenticatedError(InferdError):
    """The request lacks the credentials an endpoint requires (e.g. the admin bearer token)."""

    code = ErrorCode.UNAUTHENTICATED


class PermissionDeniedError(InferdError):
    """The request reached an API the operator restricted or did not enable."""

    code = ErrorCode.PERMISSION_DENIED


class InternalError(InferdError):
    code = ErrorCode.INTERNAL


class ModelLoadError(InternalError):
    """A model could not be loaded; the message starts with ``failed to load '<name>'``."""


class ConfigError(InvalidArgumentError):
    """A model configuration is invalid; the message names the file and the field."""


# Errors of the clients that talk to a server (``inferd.client``) and of the tools built on them.


class ServerUnreachableError(UnavailableError):
    """A server did not answer at all (refused connection, timeout, failed TLS handshake); the
    message names its URL."""


class AccessDeniedError(InferdError):
    """A server refused a client's call: a token or header it expects is missing or wrong. The
    two refusals below are both of this kind."""

    code = ErrorCode.PERMISSION_DENIED


class ServerUnauthenticatedError(UnauthenticatedError, AccessDeniedError):
    """A server answered 401 (gRPC UNAUTHENTICATED): its token was not sent, or is wrong."""


class ServerPermissionDeniedError(PermissionDeniedError, AccessDeniedError):
    """A server answered 403 (gRPC PERMISSION_DENIED): the API is closed or restricted."""


class RepositoryCallError(InferdError):
    """A server answered an admin call with an error; the message is the server's."""


class LoadFailedError(InferdError):
    """The server refused to load the model with this config; the message is the server's."""


class PerfRequestError(InferdError):
    """The server answered a request with an error; the message is the server's own."""


class PerfAccessError(PerfRequestError):
    """The server refused the client's credentials (HTTP 401 or 403, gRPC UNAUTHENTICATED or
    PERMISSION_DENIED): a header it expects is missing or wrong."""


class PerfRunError(InferdError):
    """The run could not measure anything: every request failed or none was answered."""


class HpackError(InferdError):
    """A header block that breaks RFC 7541."""


class ServerStartError(InferdError, RuntimeError):
    """``inferd serve`` exited, or did not report its ports in time; the message holds its log."""


class CandidateSkipped(InferdError):
    """A builder could not, or should not, build its candidate here; the message says why in
    one sentence (for example "this CPU has no BF16 instructions") and goes into the report."""


__all__ = [
    "AccessDeniedError",
    "AlreadyExistsError",
    "CandidateSkipped",
    "ConfigError",
    "DeadlineExceededError",
    "ErrorCode",
    "HpackError",
    "InferdError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidInputError",
    "LoadFailedError",
    "ModelLoadError",
    "NotFoundError",
    "OverloadedError",
    "PerfAccessError",
    "PerfRequestError",
    "PerfRunError",
    "PermissionDeniedError",
    "RepositoryCallError",
    "RequestCancelledError",
    "ServerPermissionDeniedError",
    "ServerStartError",
    "ServerUnauthenticatedError",
    "ServerUnreachableError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnsupportedError",
]
