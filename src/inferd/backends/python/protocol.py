"""The small control messages between the server and a Python model worker.

Messages are JSON objects (orjson) sent with ``Connection.send_bytes``: nothing is pickled, and
no tensor ever crosses the pipe — only names, datatypes, shapes and arena offsets
(:class:`~inferd.backends.python.shm.TensorRef`), parameters and error messages.

server -> worker
    ``{"op": "init", "mode": "serve" | "auto_complete", "model_file", "arena": [path, size],
    ...}`` the first message, once: what to load.
    ``{"op": "execute", "arena": [path, size] | null, "start", "inputs_end", "limit",
    "requests": [request, ...]}``
        request = ``{"id", "parameters_json", "outputs": [names], "inputs": [ref, ...]}``;
        the inputs lie in ``[start, inputs_end)``; outputs that are views of that span are
        answered in place, the others are written in ``[inputs_end, limit)`` (the rest of the
        arena may hold outputs the server still lends out). ``arena`` is set when the server
        replaced the arena (it grew, or lent-out outputs left no room).
    ``{"op": "arena", "path", "size"}`` answer to ``grow``: a bigger arena for the outputs.
    ``{"op": "abort", "message"}`` answer to ``grow`` when the outputs cannot fit.
    ``{"op": "finalize"}`` unload: call ``finalize()`` and exit.

worker -> server
    ``{"op": "ready"}`` / ``{"op": "init_error", "message"}`` once after start.
    ``{"op": "result", "responses": [{"error": [code, message] | null, "outputs": [ref]}]}``
    ``{"op": "grow", "needed", "minimum"}`` the outputs do not fit before ``limit``: room for
        inputs + outputs is ``needed``; the outputs alone (written at offset 0) need ``minimum``.
    ``{"op": "failed", "message"}`` execute raised: every request of the batch failed.
    ``{"op": "config", "config": {...}}`` the result of ``auto_complete_config``.
    ``{"op": "bye"}`` after ``finalize()``.
"""

from __future__ import annotations

from typing import Any

import orjson

from inferd.errors import (
    AlreadyExistsError,
    ErrorCode,
    InferdError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    RequestCancelledError,
    UnavailableError,
    UnsupportedError,
)

Message = dict[str, Any]

_ERRORS: dict[str, type[InferdError]] = {
    ErrorCode.INVALID_ARGUMENT.value: InvalidArgumentError,
    ErrorCode.NOT_FOUND.value: NotFoundError,
    ErrorCode.UNAVAILABLE.value: UnavailableError,
    ErrorCode.UNSUPPORTED.value: UnsupportedError,
    ErrorCode.ALREADY_EXISTS.value: AlreadyExistsError,
    ErrorCode.CANCELLED.value: RequestCancelledError,
    ErrorCode.INTERNAL.value: InternalError,
}


def encode(message: Message) -> bytes:
    return orjson.dumps(message)


def decode(data: bytes) -> Message:
    message = orjson.loads(data)
    if not isinstance(message, dict) or "op" not in message:
        raise InternalError(f"malformed message from a Python model worker: {data[:200]!r}")
    return message


def error_from_wire(item: Any) -> InferdError:
    """``[code, message]`` as sent by the worker -> the matching inferd error."""
    code, message = item
    return _ERRORS.get(str(code), InternalError)(str(message))


#: Bits of a request's ``flags`` (Triton's TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END).
SEQUENCE_START, SEQUENCE_END = 1, 2
_UINT64 = (1 << 64) - 1


def sequence_fields(parameters: dict[str, Any]) -> dict[str, Any]:
    """``correlation_id`` and ``flags`` of a request of a sequence (nothing for others):
    the id as an unsigned integer or a string, START and END as Triton's request flags."""
    raw = parameters.get("sequence_id")
    if raw is None or isinstance(raw, bool) or not isinstance(raw, int | str):
        return {}
    flags = SEQUENCE_START if parameters.get("sequence_start") is True else 0
    if parameters.get("sequence_end") is True:
        flags |= SEQUENCE_END
    return {"correlation_id": raw & _UINT64 if isinstance(raw, int) else raw, "flags": flags}
