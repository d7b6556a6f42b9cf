"""The messages a front-end process and the engine process exchange over their channel.

Every message is a fixed 16-byte header (kind, flags, call id) and a body. A call is one
request of the front end (an inference request, an HTTP request the engine answers, a gRPC
call the engine answers) and every reply carries its id. Metadata travels as JSON (never a
pickle); tensor bytes follow it raw, in the order the JSON lists them, each tensor as the
binary tensor extension writes it (numeric: little-endian row-major bytes; BYTES: 4-byte
length-prefixed elements).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
import orjson

from inferd.codecs.raw_tensor import deserialize_bytes_elements, serialize_bytes_elements
from inferd.core.inference import InferRequest, InferResponse, RequestedOutput
from inferd.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    ErrorCode,
    InferdError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    RequestCancelledError,
    UnauthenticatedError,
    UnavailableError,
    UnsupportedError,
)

__all__ = [
    "FINAL",
    "HEADER",
    "Kind",
    "Message",
    "decode_error",
    "decode_message",
    "decode_request",
    "decode_response",
    "encode_error",
    "encode_message",
    "encode_request",
    "encode_response",
    "error_from",
]

HEADER = struct.Struct("<BBxxxxxxQ")  # kind, flags, call id
#: streamed replies (HTTP bodies, gRPC stream responses) a call may have sent and not had
#: acknowledged: a client that does not read holds its call back, as a single process does
STREAM_WINDOW = 16
_JSON_LENGTH = struct.Struct("<I")
FINAL = 1  # flags: the last reply of a call (streams)
MORE = 2  # flags: an ASGI body message with more to come
UNDECODABLE = 4  # flags: a stream's request message that did not parse


class Kind(enum.IntEnum):
    # front end → engine
    INFER = 1  # an InferRequest; answered by RESPONSE or ERROR
    HTTP = 2  # an HTTP request for the engine's HTTP app; answered by HTTP_* replies
    GRPC = 3  # a unary gRPC call for the engine's servicer; answered by GRPC_REPLY
    CANCEL = 4  # the caller of a call has gone (no body)
    GRPC_STREAM = 5  # open a ModelStreamInfer stream: {"metadata"}; answered like GRPC
    ACK = 7  # the front end has passed on one streamed reply of the call (flow control)
    STREAM_IN = 6  # a request message of a stream (flags FINAL: the client's half-close;
    # UNDECODABLE: the message did not parse, the body says why)
    # engine → front end
    RESPONSE = 10  # an InferResponse
    ERROR = 11  # the call failed: {"code", "message"}
    HTTP_START = 12  # an ASGI http.response.start: {"status", "headers"}
    HTTP_BODY = 13  # an ASGI http.response.body: the bytes (flags MORE: more to come)
    HTTP_END = 14  # the engine's app returned (FINAL)
    GRPC_REPLY = 15  # {"code", "details"} and the serialized response message
    STREAM_OUT = 16  # a response message of a stream


_KINDS = {int(kind): kind for kind in Kind}  # Kind(value) without the enum's call
_unpack_header = HEADER.unpack_from


@dataclass(slots=True)
class Message:
    kind: Kind
    flags: int
    call: int
    body: memoryview


def encode_message(kind: Kind, call: int, body: bytes | bytearray = b"", flags: int = 0) -> bytes:
    return HEADER.pack(kind, flags, call) + body


def decode_message(payload: bytes | bytearray | memoryview) -> Message:
    view = memoryview(payload)
    if len(view) < HEADER.size:
        raise InternalError(f"a channel message of {len(view)} bytes is shorter than its header")
    kind, flags, call = _unpack_header(view)
    known = _KINDS.get(kind)
    if known is None:
        raise ValueError(f"{kind} is not a valid Kind")
    return Message(known, flags, call, view[HEADER.size :])


def json_and_blob_parts(meta: Any, blobs: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    """A body's parts (JSON length, JSON, blobs): a link writes them where the body goes (a
    ring slot, an arena block) without joining them first. Blobs are 1-D byte views or bytes."""
    head = orjson.dumps(meta)
    return [_JSON_LENGTH.pack(len(head)), head, *blobs]


def json_and_blobs(meta: Any, blobs: Sequence[bytes | memoryview]) -> bytes:
    return b"".join(json_and_blob_parts(meta, blobs))


def split_json(body: memoryview) -> tuple[Any, memoryview]:
    (length,) = _JSON_LENGTH.unpack_from(body)
    end = _JSON_LENGTH.size + length
    return orjson.loads(body[_JSON_LENGTH.size : end]), body[end:]


# -- tensors ----------------------------------------------------------------------------------


def _tensor_blob(array: np.ndarray[Any, Any]) -> tuple[str, bytes | memoryview]:
    dtype = array.dtype
    if dtype.kind in "OSU":
        return "BYTES", serialize_bytes_elements(array.reshape(-1))
    if dtype.byteorder == ">":
        dtype = dtype.newbyteorder("<")
    elif array.flags.c_contiguous and array.size:  # the common case: the array's own bytes
        return dtype.str, array.data.cast("B")
    data = np.ascontiguousarray(array, dtype=dtype)
    return dtype.str, data.reshape(-1).view(np.uint8).data


def _tensors_meta(
    tensors: dict[str, np.ndarray[Any, Any]],
) -> tuple[list[list[Any]], list[bytes | memoryview]]:
    meta: list[list[Any]] = []
    blobs: list[bytes | memoryview] = []
    for name, array in tensors.items():
        kind, blob = _tensor_blob(array)
        meta.append([name, kind, list(array.shape), len(blob)])
        blobs.append(blob)
    return meta, blobs


def _tensors_from(meta: list[list[Any]], data: memoryview) -> dict[str, np.ndarray[Any, Any]]:
    tensors: dict[str, np.ndarray[Any, Any]] = {}
    pos = 0
    for name, kind, shape, size in meta:
        blob = data[pos : pos + size]
        pos += size
        if kind == "BYTES":
            tensors[name] = deserialize_bytes_elements(
                blob, prod(shape), f"tensor '{name}'"
            ).reshape(shape)
            continue
        dtype = _DTYPES.get(kind)
        if dtype is None:
            dtype = np.dtype(kind)
            if len(_DTYPES) < 64:  # the kinds in use are a handful
                _DTYPES[kind] = dtype
        if size != prod(shape) * dtype.itemsize:
            raise InternalError(f"tensor '{name}' has {size} bytes, not {shape} of {kind}")
        tensors[name] = np.frombuffer(blob, dtype=dtype).reshape(shape)
    return tensors


_DTYPES: dict[str, np.dtype[Any]] = {}


# -- inference requests and responses ---------------------------------------------------------


def encode_request(request: InferRequest) -> bytes:
    return b"".join(encode_request_parts(request))


def encode_request_parts(request: InferRequest) -> list[bytes | memoryview]:
    """An inference request as the engine rebuilds it (no callbacks, no sinks: the front end
    sends only what a client can say), in parts (see :func:`json_and_blob_parts`)."""
    inputs, blobs = _tensors_meta(request.inputs)
    outputs = (
        None
        if request.outputs is None
        else [[o.name, o.binary, o.classification, o.parameters] for o in request.outputs]
    )
    meta = {
        "m": request.model_name,
        "v": request.model_version,
        "id": request.id,
        "p": request.parameters,
        "b": request.binary_output_default,
        "o": outputs,
        "i": inputs,
        "t": request.trace_context,
    }
    return json_and_blob_parts(meta, blobs)


#: the JSON heads of the requests and responses seen last, parsed, for those that hold nothing
#: a receiver may change (no parameters, requested outputs or trace context): a client sends
#: the same model, shapes and options over and over, and a model answers alike
_HEADS: dict[bytes, Any] = {}
_HEADS_KEPT = 256


def _split_head(body: memoryview, request: bool) -> tuple[Any, memoryview, bool]:
    """As :func:`split_json`, and whether the head came from :data:`_HEADS` (then it is shared:
    read it, never hand out its parts)."""
    (length,) = _JSON_LENGTH.unpack_from(body)
    end = _JSON_LENGTH.size + length
    key = bytes(body[_JSON_LENGTH.size : end])
    meta = _HEADS.get(key)
    if meta is not None:
        return meta, body[end:], True
    meta = orjson.loads(key)
    if not meta["p"] and (not request or (meta["o"] is None and meta["t"] is None)):
        if len(_HEADS) >= _HEADS_KEPT:
            _HEADS.clear()
        _HEADS[key] = meta
    return meta, body[end:], False


def decode_request(body: memoryview) -> InferRequest:
    meta, data, shared = _split_head(body, True)
    if shared:  # nothing in it to copy: no parameters, outputs or trace context
        return InferRequest(
            model_name=meta["m"],
            inputs=_tensors_from(meta["i"], data),
            model_version=meta["v"],
            id=meta["id"],
            binary_output_default=meta["b"],
        )
    outputs = meta["o"]
    return InferRequest(
        model_name=meta["m"],
        inputs=_tensors_from(meta["i"], data),
        model_version=meta["v"],
        id=meta["id"],
        outputs=None
        if outputs is None
        else [RequestedOutput(n, b, c, p) for n, b, c, p in outputs],
        parameters=meta["p"],
        binary_output_default=meta["b"],
        trace_context=meta["t"],
    )


def encode_response(response: InferResponse) -> bytes:
    return b"".join(encode_response_parts(response))


def encode_response_parts(response: InferResponse) -> list[bytes | memoryview]:
    """An inference response in parts (see :func:`json_and_blob_parts`)."""
    outputs, blobs = _tensors_meta(response.outputs)
    meta = {
        "m": response.model_name,
        "v": response.model_version,
        "id": response.id,
        "p": response.parameters,
        "o": outputs,
    }
    return json_and_blob_parts(meta, blobs)


def decode_response(body: memoryview) -> InferResponse:
    meta, data, shared = _split_head(body, False)
    return InferResponse(
        model_name=meta["m"],
        model_version=meta["v"],
        outputs=_tensors_from(meta["o"], data),
        id=meta["id"],
        parameters={} if shared else meta["p"],
    )


# -- errors -----------------------------------------------------------------------------------

_ERRORS: dict[ErrorCode, type[InferdError]] = {
    ErrorCode.INVALID_ARGUMENT: InvalidArgumentError,
    ErrorCode.NOT_FOUND: NotFoundError,
    ErrorCode.UNAVAILABLE: UnavailableError,
    ErrorCode.UNSUPPORTED: UnsupportedError,
    ErrorCode.ALREADY_EXISTS: AlreadyExistsError,
    ErrorCode.OVERLOADED: OverloadedError,
    ErrorCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    ErrorCode.CANCELLED: RequestCancelledError,
    ErrorCode.INTERNAL: InternalError,
    ErrorCode.UNAUTHENTICATED: UnauthenticatedError,
    ErrorCode.PERMISSION_DENIED: PermissionDeniedError,
}


def encode_error(exc: InferdError) -> bytes:
    return orjson.dumps({"code": exc.code.value, "message": exc.message})


def decode_error(body: memoryview) -> InferdError:
    meta = orjson.loads(body)
    return error_from(meta["code"], meta["message"])


def error_from(code: str, message: str) -> InferdError:
    """The error of the engine's code, raised again on the front end's side."""
    try:
        cls = _ERRORS[ErrorCode(code)]
    except ValueError:
        cls = InternalError
    return cls(message)


def check_kind(message: Message, *kinds: Kind) -> None:
    if message.kind not in kinds:
        raise InvalidArgumentError(
            f"unexpected channel message {message.kind.name} (expected "
            f"{' or '.join(k.name for k in kinds)})"
        )
