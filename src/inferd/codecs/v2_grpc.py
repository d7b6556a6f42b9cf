"""KServe v2 gRPC messages <-> protocol-neutral requests and responses (pure functions).

The message classes are the ones generated in ``tritonclient.grpc.service_pb2``; inferd never
compiles its own copy of the protos (two copies of ``grpc_service.proto`` would collide in the
protobuf descriptor pool).

Requests carry tensor data either in ``raw_input_contents`` (what tritonclient and perf_analyzer
send: one bytes element per input that has data, in ``inputs`` order) or in typed ``contents``.
Raw data is wrapped with ``np.frombuffer``, so the arrays handed to the engine share memory with
the message's bytes and are read-only. Responses always carry ``raw_output_contents``, one element
per output in ``outputs`` order, because the C++ client indexes it unconditionally (an output
written to shared memory gets an empty element, as Triton sends it).

Tensors in shared memory (``shared_memory_region`` as a ``string_param``, ``shared_memory_offset``
and ``shared_memory_byte_size`` as ``int64_param``) are resolved through the resolver the caller
passes (:mod:`inferd.codecs.shared_memory`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from math import prod
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2

from inferd.codecs import shared_memory
from inferd.codecs.limits import check_id, check_shape
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
from inferd.core.metadata import IndexEntry, ModelMetadata
from inferd.core.names import check_model_name
from inferd.errors import InvalidArgumentError

__all__ = [
    "ENABLE_EMPTY_FINAL_RESPONSE",
    "decode_infer_request",
    "decode_parameters",
    "encode_infer_response",
    "encode_parameters",
    "model_metadata_response",
    "repository_index_response",
]

ENABLE_EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"

_SHM_KINDS = {
    "shared_memory_region": ("string_param",),
    "shared_memory_offset": ("int64_param", "uint64_param"),
    "shared_memory_byte_size": ("int64_param", "uint64_param"),
}

# typed ``InferTensorContents`` field -> the numpy dtype the wire uses for it
_WIRE_DTYPES: dict[str, np.dtype[Any]] = {
    "bool_contents": np.dtype(np.bool_),
    "int_contents": np.dtype(np.int32),
    "int64_contents": np.dtype(np.int64),
    "uint_contents": np.dtype(np.uint32),
    "uint64_contents": np.dtype(np.uint64),
    "fp32_contents": np.dtype(np.float32),
    "fp64_contents": np.dtype(np.float64),
}


# -- parameters ---------------------------------------------------------------------------------


def decode_parameters(params: Mapping[str, Any]) -> dict[str, ParamValue]:
    """``map<string, InferParameter>`` -> Python values; well-known keys are type-checked."""
    out: dict[str, ParamValue] = {}
    for key in params:
        param = params[key]
        kind = param.WhichOneof("parameter_choice")
        if kind is None:
            raise InvalidArgumentError(f"parameter '{key}' carries no value")
        value: ParamValue = getattr(param, kind)
        if key == "sequence_id":
            if kind not in ("int64_param", "uint64_param", "string_param"):
                raise InvalidArgumentError(
                    "invalid value type for 'sequence_id' parameter, expected "
                    "int64_param or string_param"
                )
            if isinstance(value, str):
                check_id(value, "parameter 'sequence_id'")
        elif key in ("sequence_start", "sequence_end", ENABLE_EMPTY_FINAL_RESPONSE):
            if kind != "bool_param":
                raise InvalidArgumentError(
                    f"invalid value type for '{key}' parameter, expected bool_param"
                )
        elif key in ("priority", "timeout") and (
            kind not in ("int64_param", "uint64_param") or int(value) < 0
        ):
            raise InvalidArgumentError(
                f"invalid value for '{key}' parameter, expected a uint64_param or a "
                "non-negative int64_param"
            )
        out[key] = value
    return out


def encode_parameters(values: Mapping[str, ParamValue], target: Any) -> None:
    """Fill a ``map<string, InferParameter>`` from Python values."""
    for key, value in values.items():
        param = target[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            if value > 2**63 - 1:
                param.uint64_param = value
            else:
                param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = str(value)


def _shm_params(params: Mapping[str, Any], what: str) -> ShmParams | None:
    values: list[object] = []
    for key in SHM_KEYS:
        if key not in params:
            values.append(None)
            continue
        kind = params[key].WhichOneof("parameter_choice")
        if kind not in _SHM_KINDS[key]:
            raise InvalidArgumentError(
                f"invalid value type for '{key}' parameter for {what}, expected "
                f"{' or '.join(_SHM_KINDS[key])}"
            )
        values.append(getattr(params[key], kind))
    return shm_params(*values, what=what)


# -- requests -----------------------------------------------------------------------------------


def _from_contents(
    contents: Any, dtype: DataType, shape: tuple[int, ...], what: str
) -> np.ndarray[Any, Any]:
    field = dtype.grpc_field
    if field is None:
        raise InvalidArgumentError(
            f"{dtype.name} data for {what} must be sent in raw_input_contents: the typed "
            "contents have no field for it"
        )
    for descriptor, _ in contents.ListFields():
        if descriptor.name != field:
            raise InvalidArgumentError(
                f"{what} has datatype {dtype.name} but its contents set '{descriptor.name}'; "
                f"expected '{field}'"
            )
    values = getattr(contents, field)
    count = prod(shape)
    if len(values) != count:
        raise InvalidArgumentError(
            f"unexpected number of elements in '{field}' for {what}: the shape "
            f"{list(shape)} holds {count}, got {len(values)}"
        )
    if dtype.is_bytes:
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    wide = np.fromiter(values, dtype=_WIRE_DTYPES[field], count=count)
    if wide.dtype != dtype.dtype:
        narrow = wide.astype(dtype.dtype)
        if not np.array_equal(narrow, wide):
            raise InvalidArgumentError(
                f"a value in '{field}' for {what} is out of range for {dtype.name}"
            )
        wide = narrow
    return wide.reshape(shape)


def _decode_outputs(
    outputs: Iterable[Any], shm: SharedMemoryResolver | None
) -> list[RequestedOutput] | None:
    requested: list[RequestedOutput] = []
    seen: set[str] = set()
    for out in outputs:
        what = f"output '{out.name}'"
        if out.name in seen:
            raise duplicate_output(out.name)
        seen.add(out.name)
        target = _shm_params(out.parameters, what)
        params = decode_parameters(out.parameters)
        wanted = RequestedOutput(name=out.name)
        if target is not None:
            wanted.shared_memory = shared_memory.output_buffer(
                shm, target, out.name, params.get("classification")
            )
        for key, value in params.items():
            if key in SHM_KEYS:
                continue
            if key == "classification":
                wanted.classification = classification_count(out.name, value)
            elif key == "binary_data":
                continue  # an HTTP notion; gRPC outputs are always raw
            else:
                wanted.parameters[key] = value
        requested.append(wanted)
    return requested or None


def decode_infer_request(
    msg: service_pb2.ModelInferRequest, shm: SharedMemoryResolver | None = None
) -> InferRequest:
    """A ``ModelInferRequest`` -> :class:`InferRequest`; raise :class:`InvalidArgumentError`.

    ``shm`` resolves shared-memory regions (``None``: tensors in shared memory are refused as
    unsupported)."""
    model = check_model_name(msg.model_name)
    raw_contents = msg.raw_input_contents
    raw_count = len(raw_contents)
    raw_index = 0
    inputs: dict[str, np.ndarray[Any, Any]] = {}
    for tensor in msg.inputs:
        name = tensor.name
        what = f"input '{name}' for model '{model}'"
        if name in inputs:
            raise duplicate_input(name)
        target = _shm_params(tensor.parameters, f"input '{name}'")
        try:
            dtype = datatypes.from_name(tensor.datatype)
        except InvalidArgumentError:
            raise InvalidArgumentError(f"invalid datatype '{tensor.datatype}' for {what}") from None
        shape = check_shape(tensor.shape, f"input '{name}'")  # the same bounds as HTTP
        if target is not None:
            if tensor.HasField("contents"):
                raise InvalidArgumentError(
                    f"unexpected 'content' provided when using shared memory for input tensor "
                    f"'{name}' for model '{model}'"
                )
            inputs[name] = shared_memory.input_tensor(shm, target, dtype, shape, what)
            continue
        if tensor.HasField("contents"):
            if raw_count:
                raise InvalidArgumentError(
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{name}' for model '{model}'"
                )
            inputs[name] = _from_contents(tensor.contents, dtype, shape, what)
            continue
        if raw_index >= raw_count:
            raise InvalidArgumentError(
                f"unable to find data for input tensor '{name}' for model '{model}' in request."
            )
        inputs[name] = tensor_from_buffer(raw_contents[raw_index], dtype, shape, what)
        raw_index += 1
    if raw_index != raw_count:
        raise InvalidArgumentError(
            f"the request for model '{model}' carries {raw_count} raw_input_contents "
            f"element(s) but only {raw_index} input(s) take raw data"
        )
    return InferRequest(
        model_name=model,
        inputs=inputs,
        model_version=msg.model_version,
        id=check_id(msg.id, "inference request 'id'"),
        outputs=_decode_outputs(msg.outputs, shm),
        parameters=decode_parameters(msg.parameters),
    )


# -- responses ----------------------------------------------------------------------------------


def _raw_output(array: np.ndarray[Any, Any]) -> tuple[DataType, bytes]:
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    dtype = datatypes.from_dtype(array.dtype)
    if dtype.is_bytes:
        return dtype, serialize_bytes_elements(array.reshape(-1).tolist())
    return dtype, array.tobytes(order="C")  # protobuf bytes fields accept only bytes


def encode_infer_response(
    response: InferResponse,
    *,
    into: service_pb2.ModelInferResponse | None = None,
    request: InferRequest | None = None,
) -> service_pb2.ModelInferResponse:
    """An :class:`InferResponse` -> ``ModelInferResponse`` with raw output contents only.

    ``into`` fills an existing (empty) message, e.g. the ``infer_response`` field of a stream
    response, which saves copying the tensor bytes once more. Outputs that ``request`` asked
    for in shared memory are written there (their raw contents stay empty).
    """
    targets: dict[str, OutputBuffer] = {}
    if request is not None and request.outputs is not None:
        targets = {o.name: o.shared_memory for o in request.outputs if o.shared_memory is not None}
    msg = service_pb2.ModelInferResponse() if into is None else into
    msg.model_name = response.model_name
    msg.model_version = response.model_version
    msg.id = response.id
    if response.parameters:
        encode_parameters(response.parameters, msg.parameters)
    for name, array in response.outputs.items():
        target = targets.get(name)
        if target is not None:
            dtype, raw = shared_memory.write_output(target, name, array), b""
        else:
            dtype, raw = _raw_output(array)
        out = msg.outputs.add()
        out.name = name
        out.datatype = dtype.name
        out.shape.extend(array.shape)
        msg.raw_output_contents.append(raw)
    return msg


def model_metadata_response(meta: ModelMetadata) -> service_pb2.ModelMetadataResponse:
    """Model metadata as gRPC sends it (HTTP: ``v2_http.model_metadata_dict``)."""
    tensor = service_pb2.ModelMetadataResponse.TensorMetadata
    return service_pb2.ModelMetadataResponse(
        name=meta.name,
        versions=meta.versions,
        platform=meta.platform,
        inputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.inputs],
        outputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.outputs],
    )


def repository_index_response(
    entries: Iterable[IndexEntry],
) -> service_pb2.RepositoryIndexResponse:
    """The repository index as gRPC sends it: proto3 strings, so absent fields are empty
    (HTTP: ``v2_http.repository_index_list`` leaves them out)."""
    index = service_pb2.RepositoryIndexResponse.ModelIndex
    return service_pb2.RepositoryIndexResponse(
        models=[
            index(name=e.name, version=e.version or "", state=e.state or "", reason=e.reason)
            for e in entries
        ]
    )
