"""OpenAI's error shape, and the one table from inferd's error codes to it.

Every ``/v1`` refusal is answered as OpenAI answers: an HTTP status and the body
``{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}``, so the ``openai`` SDK
raises its matching exception (``BadRequestError``, ``NotFoundError``, ``AuthenticationError``…)
with the message intact.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import orjson

from inferd.errors import ErrorCode, InferdError
from inferd.frontends.http.errors import HTTP_STATUS, HttpStatusError

# OpenAI's ``type`` for each status it uses; any other status is a server error.
_TYPE_BY_STATUS: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable_error",
    504: "timeout_error",
}


class OpenAIError(Exception):
    """A refusal of a ``/v1`` request, with OpenAI's fields.

    ``param`` names the request field at fault (``"max_tokens"``, ``"messages"``…), ``code`` a
    stable machine-readable reason (``"model_not_found"``, ``"context_length_exceeded"``…).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,  # OpenAI's own field name
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPE_BY_STATUS.get(status, "server_error")

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.body())


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    """A 400 ``invalid_request_error`` naming the field at fault."""
    return OpenAIError(400, message, param=param, code=code)


def model_not_found(model: str) -> OpenAIError:
    return OpenAIError(
        404,
        f"The model '{model}' does not exist or cannot answer this endpoint",
        param="model",
        code="model_not_found",
    )


def as_openai_error(exc: BaseException, log: logging.Logger, context: str) -> OpenAIError:
    """Any exception raised while serving a ``/v1`` request, in OpenAI's shape.

    inferd's own errors keep their message and map through the HTTP front end's status table;
    anything else is logged with a fresh request id and answered ``internal error``.
    """
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, InferdError):
        status = HTTP_STATUS[exc.code]
        code = "model_not_found" if exc.code is ErrorCode.NOT_FOUND else None
        return OpenAIError(status, exc.message, code=code)
    if isinstance(exc, HttpStatusError):
        return OpenAIError(exc.status, exc.message)
    request_id = uuid.uuid4().hex[:12]
    log.error("unexpected error [request %s] %s", request_id, context, exc_info=exc)
    return OpenAIError(500, f"internal error (request {request_id})", type="server_error")


__all__ = ["OpenAIError", "as_openai_error", "invalid", "model_not_found"]
