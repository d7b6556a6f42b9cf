"""The generate extension's JSON (``/generate``, ``/generate_stream``) <-> core, pure.

A generate request is one JSON object whose keys name the model's inputs directly::

    {"id": "42", "text_input": "hello", "max_tokens": 8, "parameters": {"temperature": 0.5}}

Mapping rules (the same as Triton's):

* A key that names an input of the model becomes that input: a JSON scalar is one element, a
  flat JSON array is the elements. The datatype is the model's; the shape is the model's with
  its fixed dimensions kept and the element count placed in the innermost variable dimension
  (any other variable dimension, such as the batch dimension, becomes 1). A count the fixed
  dimensions do not divide is refused.
* ``parameters`` (a JSON object) is mapped the same way, one level down: each of its keys is
  an input when it names one, else a request parameter.
* Any other key becomes a request parameter; its value must be a string, number or boolean.
  Keys starting with ``triton_`` are reserved.
* ``id`` (a string) is also the request id, returned in every response.
* A key given twice in one JSON object is refused, naming the key (a JSON parser would keep
  one of the two silently; Triton refuses an input given twice).

A response is one JSON object: ``id`` (when the request had one), ``model_name``,
``model_version``, the response's parameters, then each output by name, a one-element output
as a bare scalar and any other as a flat array. BYTES outputs are UTF-8 strings.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from math import prod
from typing import Any

import numpy as np

from inferd.codecs.json_tensor import json_tensor
from inferd.codecs.limits import check_id
from inferd.codecs.request_rules import duplicate_input
from inferd.core.datatypes import DataType, from_name
from inferd.core.inference import InferRequest, InferResponse, ParamValue
from inferd.core.metadata import TensorMetadata
from inferd.errors import InvalidArgumentError, UnsupportedError

__all__ = [
    "SSE_CONTENT_TYPE",
    "check_unique_keys",
    "decode_generate_request",
    "encode_generate_response",
    "generate_shape",
    "sse_event",
]

SSE_CONTENT_TYPE = b"text/event-stream; charset=utf-8"
PARAMETERS_KEY = "parameters"


def generate_shape(count: int, dims: Sequence[int], name: str) -> tuple[int, ...]:
    """The shape of ``count`` elements for an input whose model shape is ``dims`` (-1 for a
    variable dimension): fixed dimensions kept, the count that remains in the innermost
    variable one, 1 in every other."""
    fixed = prod(d for d in dims if d != -1)
    variable = [i for i, d in enumerate(dims) if d == -1]
    if fixed == 0:  # a zero dimension: only an empty value fits
        remaining = 1 if count == 0 else -1
    elif count % fixed:
        remaining = -1
    else:
        remaining = count // fixed
    if remaining < 0 or (remaining != 1 and not variable):
        raise InvalidArgumentError(
            f"cannot shape the {count} element(s) given for input '{name}' to its shape "
            f"{list(dims)}"
        )
    shape = [1 if d == -1 else d for d in dims]
    if variable:
        shape[variable[-1]] = remaining
    return tuple(shape)


def check_unique_keys(body: bytes | str, inputs: Collection[str] = ()) -> None:
    """Raise :class:`InvalidArgumentError` naming the first key that appears twice in one JSON
    object of ``body`` (already known to be valid JSON); a key naming one of ``inputs`` gets
    Triton's words for an input given twice."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                if key in inputs:
                    raise InvalidArgumentError(f"input '{key}' already exists in request")
                raise InvalidArgumentError(
                    f"key '{key}' appears more than once in the generate request"
                )
            seen[key] = value
        return seen

    json.loads(body, object_pairs_hook=unique)


def decode_generate_request(
    model_name: str,
    model_version: str,
    body: dict[str, Any],
    inputs: Sequence[TensorMetadata],
) -> InferRequest:
    """The inference request held in a parsed generate request ``body`` for a model with
    ``inputs`` (its metadata: datatypes and full shapes)."""
    by_name = {t.name: t for t in inputs}
    request = InferRequest(model_name=model_name, inputs={}, model_version=model_version)
    request_id = body.get("id")
    if request_id is not None:
        if not isinstance(request_id, str):
            raise InvalidArgumentError("'id' of a generate request must be a JSON string")
        request.id = check_id(request_id, "'id' of the generate request")
    for key, value in body.items():
        if key == PARAMETERS_KEY and key not in by_name:
            if not isinstance(value, dict):
                raise InvalidArgumentError(
                    f"'{PARAMETERS_KEY}' of a generate request must be a JSON object"
                )
            for inner, inner_value in value.items():
                _map_key(request, inner, inner_value, by_name, f"'{PARAMETERS_KEY}'")
        elif key == "id" and key not in by_name:
            continue
        else:
            _map_key(request, key, value, by_name, "the generate request")
    return request


def _map_key(
    request: InferRequest,
    key: str,
    value: Any,
    inputs: dict[str, TensorMetadata],
    where: str,
) -> None:
    meta = inputs.get(key)
    if meta is None:
        request.parameters[key] = _parameter(key, value, request.model_name, where)
        return
    if key in request.inputs:
        raise duplicate_input(key)
    request.inputs[key] = _input_tensor(meta, value)


def _parameter(key: str, value: Any, model: str, where: str) -> ParamValue:
    if key.startswith("triton_"):
        raise InvalidArgumentError(
            f"parameter '{key}' of {where} is reserved (the 'triton_' prefix) and cannot be set "
            "on a generate request"
        )
    if key == "sequence_id" and isinstance(value, str):
        check_id(value, f"parameter 'sequence_id' of {where}")
    if isinstance(value, (bool, int, float, str)):
        return value
    raise InvalidArgumentError(
        f"'{key}' of {where} is not an input of model '{model}', and as a parameter its value "
        f"must be a string, number or boolean, not {_json_kind(value)}"
    )


def _input_tensor(meta: TensorMetadata, value: Any) -> np.ndarray[Any, Any]:
    dtype: DataType = from_name(meta.datatype)
    if isinstance(value, dict) or value is None:
        raise InvalidArgumentError(
            f"input '{meta.name}' of a generate request must be a JSON scalar or a flat array, "
            f"not {_json_kind(value)}"
        )
    data = value if isinstance(value, list) else [value]
    if any(isinstance(item, (list, dict)) for item in data):
        raise InvalidArgumentError(
            f"input '{meta.name}' of a generate request must be a flat JSON array (no nested "
            "arrays or objects): its shape comes from the model"
        )
    shape = generate_shape(len(data), meta.shape, meta.name)
    return json_tensor(data, dtype, shape, meta.name)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def encode_generate_response(response: InferResponse) -> dict[str, Any]:
    """The generate response object of one inference response (orjson serialises it)."""
    out: dict[str, Any] = {}
    if response.id:
        out["id"] = response.id
    out["model_name"] = response.model_name
    out["model_version"] = response.model_version
    out.update(response.parameters)
    for name, array in response.outputs.items():
        out[name] = _output_value(name, array)
    return out


def _output_value(name: str, array: np.ndarray[Any, Any]) -> Any:
    flat = np.asarray(array).reshape(-1)
    if flat.dtype == object or flat.dtype.kind in "SU":
        values: list[Any] = []
        for item in flat.tolist():
            if isinstance(item, bytes):
                try:
                    values.append(item.decode())
                except UnicodeDecodeError:
                    raise UnsupportedError(
                        f"output '{name}' holds bytes that are not UTF-8 text, which a generate "
                        "response (JSON) cannot carry; use the infer endpoint with binary data"
                    ) from None
            else:
                values.append(str(item))
        return values[0] if len(values) == 1 else values
    if flat.dtype.kind == "V" or (flat.dtype.kind == "f" and flat.dtype.itemsize < 4):
        flat = flat.astype(np.float32)  # FP16 / BF16 as JSON numbers
    values = flat.tolist()
    return values[0] if len(values) == 1 else values


def sse_event(payload: bytes) -> bytes:
    """One server-sent event carrying ``payload`` (one line of JSON) as its data."""
    return b"data: " + payload + b"\n\n"
