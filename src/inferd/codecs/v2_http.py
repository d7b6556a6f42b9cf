"""KServe v2 REST inference bodies, with Triton's binary tensor extension, <-> core types.

Pure functions, no I/O. The HTTP front end hands over the (already decompressed) request body and
the value of the ``Inference-Header-Content-Length`` header; it gets back the JSON header of the
reply and the binary blobs that follow it.

Wire rules (see PROTOCOL.md §1.7, §1.8, §2.1):

* Each input carries exactly one of ``data`` (JSON, flat or nested, row-major),
  ``parameters.binary_data_size`` (raw little-endian bytes after the JSON header, in input order)
  or ``parameters.shared_memory_region`` (read from a registered region through the resolver
  the caller passes; see :mod:`inferd.codecs.shared_memory`).
* BYTES elements are JSON strings (UTF-8 encoded into ``bytes``) or, in binary, a 4-byte
  little-endian length followed by that many bytes, per element.
* Binary inputs are views into the request body (``np.frombuffer``), so they are read-only.
* Output format: per-output ``binary_data`` wins, then the request's ``binary_data_output``,
  default JSON. JSON outputs carry no ``parameters`` key at all. An output requested in shared
  memory is written there and listed with only its name, datatype and shape (as Triton does).

Choices this codec makes where Triton leaves a gap:

* An output sent as JSON by default that JSON cannot represent (BYTES elements that are not
  valid UTF-8; NaN or infinite floats) is sent in binary form instead, with ``binary_data_size``.
  Clients pick the format per output from its parameters, so they read it unchanged and exactly,
  whereas an invalid JSON string or a ``NaN`` token would break their JSON parser. An output
  whose own ``binary_data`` is ``false`` is an explicit request for JSON: BYTES elements that
  are not valid UTF-8 are then refused, naming the output (Triton writes them into the JSON
  unchanged, which no JSON parser reads).
* FP16 and BF16 outputs requested as JSON are written as JSON numbers (Triton refuses); FP16/BF16
  *inputs* in JSON are refused with Triton's message.
* The host is assumed little-endian (as every platform numpy wheels ship for).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from inferd.codecs import shared_memory
from inferd.codecs.json_tensor import json_tensor
from inferd.codecs.limits import MAX_DIMS, MAX_ELEMENTS, check_id, check_shape
from inferd.codecs.raw_tensor import serialize_bytes_elements, tensor_from_buffer
from inferd.codecs.request_rules import classification_count, duplicate_input, duplicate_output
from inferd.codecs.shared_memory import KEYS as SHM_KEYS
from inferd.codecs.shared_memory import SharedMemoryResolver, ShmParams, shm_params
from inferd.core import datatypes
from inferd.core.datatypes import DataType
from inferd.core.inference import (
    InferRequest,
    InferResponse,
    OutputBuffer,
    ParamValue,
    RequestedOutput,
)
from inferd.core.metadata import IndexEntry, ModelMetadata, ServerMetadata
from inferd.errors import InvalidArgumentError, UnsupportedError

_ONE_OF_MESSAGE = (
    "Input must set only one of the following fields: 'data', 'binary_data_size' in "
    "'parameters', 'shared_memory_region' in 'parameters'. But {problem} for input '{name}'"
)
_MISSING_HEADER_MESSAGE = (
    "must specify valid 'Infer-Header-Content-Length' in request header and "
    "'binary_data_size' when passing inputs in binary data format (input '{name}')"
)
_UINT_PARAMS = ("priority", "timeout")
_BOOL_PARAMS = ("sequence_start", "sequence_end")

Blob = bytes | memoryview


# ------------------------------------------------------------------------------------------------
# request decoding
# ------------------------------------------------------------------------------------------------


def decode_infer_request(
    model_name: str,
    model_version: str,
    body: bytes | memoryview,
    header_length: int | None,
    shm: SharedMemoryResolver | None = None,
) -> InferRequest:
    """Decode a v2 inference request body; raise :class:`InvalidArgumentError` on any flaw.

    ``header_length`` is the ``Inference-Header-Content-Length`` header (``None`` when absent:
    the whole body is JSON). ``shm`` resolves shared-memory regions (``None``: tensors in shared
    memory are refused as unsupported).
    """
    view = memoryview(body) if not isinstance(body, memoryview) else body
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    total = len(view)
    if header_length is None:
        header_view, rest = view, view[total:]
    else:
        if header_length == 0:
            raise UnsupportedError(
                "raw binary inference requests (Inference-Header-Content-Length: 0) are not "
                "supported; send a JSON inference header"
            )
        if header_length < 0 or header_length > total:
            raise InvalidArgumentError(
                f"Inference-Header-Content-Length {header_length} is outside the request body "
                f"of {total} bytes"
            )
        header_view, rest = view[:header_length], view[header_length:]
    header = _parse_json_object(header_view, "inference request")

    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgumentError("inference request 'id' must be a string")
    check_id(request_id, "inference request 'id'")
    parameters, binary_default = _request_parameters(header.get("parameters"))

    raw_inputs = header.get("inputs")
    if not isinstance(raw_inputs, list):
        raise InvalidArgumentError("inference request must have an 'inputs' array")
    inputs: dict[str, np.ndarray[Any, Any]] = {}
    offset = 0
    body_bytes = len(rest)
    for index, raw in enumerate(raw_inputs):
        if not isinstance(raw, dict):
            raise InvalidArgumentError(f"inference request input #{index} must be a JSON object")
        name = raw.get("name")
        if not isinstance(name, str):
            raise InvalidArgumentError(
                f"inference request input #{index} must have a string 'name'"
            )
        if name in inputs:
            raise duplicate_input(name)
        dtype = _input_datatype(raw, name)
        shape = _shape(raw.get("shape"), name)
        size = _binary_size(raw, name)
        if isinstance(size, ShmParams):
            what = f"input '{name}' for model '{model_name}'"
            inputs[name] = shared_memory.input_tensor(shm, size, dtype, shape, what)
            continue
        if size is None:
            inputs[name] = json_tensor(raw["data"], dtype, shape, name)
            continue
        if header_length is None:
            raise InvalidArgumentError(_MISSING_HEADER_MESSAGE.format(name=name))
        if size > body_bytes - offset:
            raise InvalidArgumentError(
                f"unexpected size for input '{name}', expecting {size} bytes but only "
                f"{body_bytes - offset} bytes remain in the request body for model "
                f"'{model_name}'"
            )
        what = f"input '{name}' for model '{model_name}'"
        inputs[name] = tensor_from_buffer(rest[offset : offset + size], dtype, shape, what)
        offset += size
    if offset != body_bytes:
        raise InvalidArgumentError(
            f"unexpected additional input data for model '{model_name}': "
            f"{body_bytes - offset} bytes after the last binary input"
        )

    outputs = _requested_outputs(header.get("outputs"), shm)
    return InferRequest(
        model_name=model_name,
        model_version=model_version,
        inputs=inputs,
        id=request_id,
        outputs=outputs,
        parameters=parameters,
        binary_output_default=binary_default,
    )


def _parse_json_object(data: bytes | memoryview, what: str) -> dict[str, Any]:
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"failed to parse the {what} JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(f"the {what} JSON must be an object")
    return parsed


def _is_uint(value: Any) -> bool:
    return type(value) is int and value >= 0


def _scalar_param(key: str, value: Any, where: str) -> ParamValue:
    if isinstance(value, (bool, int, float, str)):
        return value
    raise InvalidArgumentError(
        f"parameter '{key}' of {where} must be a string, number or boolean, "
        f"got {type(value).__name__ if value is not None else 'null'}"
    )


def _request_parameters(raw: Any) -> tuple[dict[str, ParamValue], bool]:
    if raw is None:
        return {}, False
    if not isinstance(raw, dict):
        raise InvalidArgumentError("inference request 'parameters' must be a JSON object")
    params: dict[str, ParamValue] = {}
    binary_default = False
    for key, value in raw.items():
        if key.startswith("triton_"):
            raise InvalidArgumentError(
                f"parameter '{key}' is reserved (the 'triton_' prefix) and cannot be set on an "
                "HTTP inference request"
            )
        if key == "binary_data_output":
            if not isinstance(value, bool):
                raise InvalidArgumentError("parameter 'binary_data_output' must be a boolean")
            binary_default = value
            continue
        if key == "sequence_id":
            if isinstance(value, str):
                check_id(value, "parameter 'sequence_id'")
            elif not _is_uint(value):
                raise InvalidArgumentError(
                    "parameter 'sequence_id' must be an unsigned integer or a string"
                )
        if key in _UINT_PARAMS and not _is_uint(value):
            raise InvalidArgumentError(f"parameter '{key}' must be an unsigned integer")
        if key in _BOOL_PARAMS and not isinstance(value, bool):
            raise InvalidArgumentError(f"parameter '{key}' must be a boolean")
        params[key] = _scalar_param(key, value, "the inference request")
    return params, binary_default


def _input_datatype(raw: dict[str, Any], name: str) -> DataType:
    value = raw.get("datatype")
    if not isinstance(value, str):
        raise InvalidArgumentError(f"input '{name}' must have a string 'datatype'")
    try:
        return datatypes.from_name(value)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"input '{name}': {exc}") from None


def _shape(value: Any, name: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise InvalidArgumentError(f"input '{name}' must have a 'shape' array")
    return check_shape(value, f"input '{name}'")


def _binary_size(raw: dict[str, Any], name: str) -> int | ShmParams | None:
    """The ``binary_data_size``, the shared-memory parameters, or ``None`` for JSON ``data``;
    errors for none or several."""
    params = raw.get("parameters")
    if params is None:
        params = {}
    elif not isinstance(params, dict):
        raise InvalidArgumentError(f"'parameters' of input '{name}' must be a JSON object")
    has_data = "data" in raw
    has_binary = "binary_data_size" in params
    has_shm = "shared_memory_region" in params
    count = has_data + has_binary + has_shm
    if count != 1:
        problem = "none of them is set" if count == 0 else "more than one is set"
        raise InvalidArgumentError(_ONE_OF_MESSAGE.format(problem=problem, name=name))
    target = shm_params(*(params.get(key) for key in SHM_KEYS), what=f"input '{name}'")
    if target is not None:
        return target
    if has_data:
        return None
    size = params["binary_data_size"]
    if not _is_uint(size):
        raise InvalidArgumentError(
            f"'binary_data_size' of input '{name}' must be a non-negative integer"
        )
    return int(size)


def _requested_outputs(raw: Any, shm: SharedMemoryResolver | None) -> list[RequestedOutput] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise InvalidArgumentError("inference request 'outputs' must be an array")
    outputs: list[RequestedOutput] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InvalidArgumentError(
                f"requested output #{index} must be an object with a string 'name'"
            )
        name: str = item["name"]
        if name in seen:
            raise duplicate_output(name)
        seen.add(name)
        params = item.get("parameters")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            raise InvalidArgumentError(f"'parameters' of output '{name}' must be a JSON object")
        wanted = RequestedOutput(name=name)
        target = shm_params(*(params.get(key) for key in SHM_KEYS), what=f"output '{name}'")
        if target is not None:
            classification = params.get("classification")
            wanted.shared_memory = shared_memory.output_buffer(shm, target, name, classification)
        for key, value in params.items():
            if key == "binary_data":
                if not isinstance(value, bool):
                    raise InvalidArgumentError(
                        f"'binary_data' of output '{name}' must be a boolean"
                    )
                wanted.binary = value
            elif key == "classification":
                wanted.classification = classification_count(name, value)
            elif key in SHM_KEYS:
                continue
            else:
                wanted.parameters[key] = _scalar_param(key, value, f"output '{name}'")
        outputs.append(wanted)
    return outputs


# ------------------------------------------------------------------------------------------------
# response encoding
# ------------------------------------------------------------------------------------------------


def encode_infer_response(
    response: InferResponse, request: InferRequest
) -> tuple[bytes, list[Blob]]:
    """Return the JSON inference header and the binary blobs that follow it, in output order.

    The blobs are views of the output arrays where possible (no copy); the caller writes
    ``header + b"".join(blobs)`` and, when any blob is non-empty, sends
    ``Inference-Header-Content-Length: len(header)``.
    """
    binary_by_name: dict[str, bool] = {}
    shm_by_name: dict[str, OutputBuffer] = {}
    if request.outputs is not None:
        for wanted in request.outputs:
            if wanted.binary is not None:
                binary_by_name[wanted.name] = wanted.binary
            if wanted.shared_memory is not None:
                shm_by_name[wanted.name] = wanted.shared_memory
    default_binary = request.binary_output_default

    outputs: list[dict[str, Any]] = []
    blobs: list[Blob] = []
    for name, array in response.outputs.items():
        target = shm_by_name.get(name)
        if target is not None:
            shm_type = shared_memory.write_output(target, name, array)
            outputs.append({"name": name, "datatype": shm_type.name, "shape": list(array.shape)})
            continue
        array = _little_endian(array)
        dtype = datatypes.from_dtype(array.dtype)
        entry: dict[str, Any] = {
            "name": name,
            "datatype": dtype.name,
            "shape": list(array.shape),
        }
        binary = binary_by_name.get(name, default_binary)
        if not binary:
            data = _json_data(array, dtype)
            if data is None and dtype.is_bytes and binary_by_name.get(name) is False:
                raise InvalidArgumentError(
                    f"output '{name}' was requested with 'binary_data' false, but its BYTES "
                    "elements are not all valid UTF-8, which JSON cannot hold; request it with "
                    "'binary_data' true"
                )
            if data is not None:
                entry["data"] = data
                outputs.append(entry)
                continue
        blob = _binary_blob(array, dtype)
        entry["parameters"] = {"binary_data_size": len(blob)}
        blobs.append(blob)
        outputs.append(entry)

    header: dict[str, Any] = {}
    if response.id:
        header["id"] = response.id
    header["model_name"] = response.model_name
    header["model_version"] = str(response.model_version)
    if response.parameters:
        header["parameters"] = response.parameters
    header["outputs"] = outputs
    return orjson.dumps(header, option=orjson.OPT_SERIALIZE_NUMPY), blobs


def tensor_entry(name: str, array: np.ndarray[Any, Any]) -> tuple[dict[str, Any], Blob | None]:
    """``array`` as one v2 JSON tensor, written as a JSON response output is: name, datatype,
    shape and flat ``data``. A tensor JSON cannot hold (BYTES that are not UTF-8, NaN or
    infinite floats) has no ``data``; its binary form is returned beside the entry instead."""
    array = _little_endian(array)
    dtype = datatypes.from_dtype(array.dtype)
    entry: dict[str, Any] = {"name": name, "datatype": dtype.name, "shape": list(array.shape)}
    data = _json_data(array, dtype)
    if data is not None:
        entry["data"] = data
        return entry, None
    return entry, _binary_blob(array, dtype)


def _little_endian(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if array.dtype.byteorder == ">":
        return array.astype(array.dtype.newbyteorder("<"))
    return array


def _json_data(array: np.ndarray[Any, Any], dtype: DataType) -> Any:
    """A value orjson can serialise flat, or ``None`` when the output must go binary."""
    if dtype.is_bytes:
        texts: list[str] = []
        for item in array.reshape(-1).tolist():
            if isinstance(item, bytes):
                try:
                    texts.append(item.decode())
                except UnicodeDecodeError:
                    return None
            else:
                texts.append(str(item))
        return texts
    if dtype.name == "BF16":
        array = array.astype(np.float32)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        return None
    return np.ascontiguousarray(array).reshape(-1)


def _binary_blob(array: np.ndarray[Any, Any], dtype: DataType) -> Blob:
    if dtype.is_bytes:
        return serialize_bytes_elements(array.reshape(-1).tolist())
    flat = np.ascontiguousarray(array).reshape(-1)
    return flat.view(np.uint8).data


# ------------------------------------------------------------------------------------------------
# the other JSON endpoints
# ------------------------------------------------------------------------------------------------


def server_metadata_dict(meta: ServerMetadata) -> dict[str, Any]:
    return {"name": meta.name, "version": meta.version, "extensions": list(meta.extensions)}


def model_metadata_dict(meta: ModelMetadata) -> dict[str, Any]:
    return {
        "name": meta.name,
        "versions": list(meta.versions),
        "platform": meta.platform,
        "inputs": [
            {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in meta.inputs
        ],
        "outputs": [
            {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in meta.outputs
        ],
    }


def repository_index_list(entries: Sequence[IndexEntry]) -> list[dict[str, str]]:
    """Never-loaded models as ``{"name"}`` only; ``reason`` only when non-empty."""
    rows: list[dict[str, str]] = []
    for entry in entries:
        row = {"name": entry.name}
        if entry.version is not None:
            row["version"] = entry.version
        if entry.state is not None:
            row["state"] = entry.state
        if entry.reason:
            row["reason"] = entry.reason
        row.update(entry.details)
        rows.append(row)
    return rows


def loads(data: bytes | memoryview) -> Any:
    """Parse JSON; malformed JSON (or invalid UTF-8) raises :class:`InvalidArgumentError`."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"malformed JSON: {exc}") from None


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


__all__ = [
    "MAX_DIMS",
    "MAX_ELEMENTS",
    "decode_infer_request",
    "dumps",
    "encode_infer_response",
    "error_body",
    "loads",
    "model_metadata_dict",
    "repository_index_list",
    "server_metadata_dict",
    "tensor_entry",
]
