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


__all__ = [
    "AlreadyExistsError",
    "ConfigError",
    "DeadlineExceededError",
    "ErrorCode",
    "InferdError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidInputError",
    "ModelLoadError",
    "NotFoundError",
    "OverloadedError",
    "PermissionDeniedError",
    "RequestCancelledError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnsupportedError",
]
