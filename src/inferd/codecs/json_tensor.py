"""The ``data`` of a v2 JSON input (a JSON array, flat or nested, row-major) -> a numpy array.

Pure; every flaw raises :class:`InvalidArgumentError` naming the input. Rules:

* BOOL takes ``true``/``false`` only; numbers are not booleans.
* Integer datatypes (INT*/UINT*) take JSON integers and whole-number floats (``1.0``, as some
  v2 clients write every number), exactly: ``1.5`` is refused, and so is any value outside the
  datatype's range (``300`` for UINT8 is refused, never wrapped). ``true``/``false`` are not
  numbers. JSON has no NaN or infinity tokens; a literal too large for a double is refused by
  the JSON parser.
* FP32/FP64 take JSON numbers; a number beyond FP32's range becomes infinity, as a C cast would.
* FP16/BF16 are refused in JSON (as Triton does): send them in binary.
* BYTES takes JSON strings, encoded as UTF-8.

Memory: the parsed JSON list is read once; flat data goes straight to ``np.array`` (nested data
is flattened into one list of references first, 8 bytes per element). The result holds only
the numbers (the datatype's item size per element).
"""

from __future__ import annotations

from collections.abc import Iterable
from math import prod
from typing import Any

import numpy as np

from inferd.core.datatypes import DataType
from inferd.errors import InvalidArgumentError


def json_tensor(
    data: Any, dtype: DataType, shape: tuple[int, ...], name: str
) -> np.ndarray[Any, Any]:
    """The tensor of shape ``shape`` held in the JSON ``data`` of input ``name``."""
    if dtype.name in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"receiving {dtype.name} data via JSON is not supported. Please use the binary "
            f"data format for input '{name}'"
        )
    if not isinstance(data, list):
        raise InvalidArgumentError(f"'data' of input '{name}' must be a JSON array")
    kinds = set(map(type, data))
    if list in kinds:
        data = _flatten(data)
        kinds = set(map(type, data))
    expected = prod(shape)
    if len(data) != expected:
        raise InvalidArgumentError(
            f"unexpected number of elements for input '{name}': shape {list(shape)} needs "
            f"{expected}, got {len(data)}"
        )
    if dtype.is_bytes:
        return _bytes_tensor(data, kinds, name).reshape(shape)
    kind = dtype.dtype.kind
    if kind == "b":
        if not kinds <= {bool}:
            raise InvalidArgumentError(f"data of BOOL input '{name}' must be JSON true/false")
        return np.array(data, dtype=np.bool_).reshape(shape)
    if not kinds <= {int, float}:
        wanted = "integers" if kind in "iu" else "numbers"
        raise InvalidArgumentError(
            f"data of {dtype.name} input '{name}' must be JSON {wanted}, got "
            f"{_json_kind(next(v for v in data if type(v) not in (int, float)))}"
        )
    if kind in "iu":
        return _integer_tensor(data, kinds, dtype, name).reshape(shape)
    try:
        with np.errstate(over="ignore"):  # a too-large float becomes inf, as a C cast would
            array = np.array(data, dtype=dtype.dtype)
    except OverflowError:  # an integer beyond any double
        raise InvalidArgumentError(
            f"data of input '{name}' does not fit datatype {dtype.name}: an integer is too "
            "large for a floating-point number"
        ) from None
    return array.reshape(shape)


def _flatten(data: list[Any]) -> list[Any]:
    """Row-major flattening of nested JSON arrays, without recursion."""
    flat: list[Any] = []
    stack: list[Iterable[Any]] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if type(item) is list:
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _bytes_tensor(data: list[Any], kinds: set[type], name: str) -> np.ndarray[Any, Any]:
    if not kinds <= {str}:
        raise InvalidArgumentError(f"data of BYTES input '{name}' must be JSON strings")
    out = np.empty(len(data), dtype=object)
    try:
        out[:] = [s.encode() for s in data]
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"data of input '{name}' is not valid UTF-8: {exc}") from None
    return out


def _integer_tensor(
    data: list[Any], kinds: set[type], dtype: DataType, name: str
) -> np.ndarray[Any, Any]:
    info = np.iinfo(dtype.dtype)
    lo, hi = int(info.min), int(info.max)
    if float in kinds:
        if int in kinds:  # mixed: exact per element (a double cannot hold every int64)
            data = [v if type(v) is int else _whole(v, lo, hi, dtype, name) for v in data]
        else:
            values = np.array(data, dtype=np.float64)
            # lo and hi + 1 are exact doubles (0, or +-2**k); NaN fails every comparison
            ok = (values >= lo) & (values < float(hi + 1)) & (np.floor(values) == values)
            if not ok.all():
                bad = data[int(np.argmin(ok))]
                _whole(bad, lo, hi, dtype, name)  # raises with the precise reason
            return values.astype(dtype.dtype)
    try:
        return np.array(data, dtype=dtype.dtype)
    except OverflowError:
        bad = next(v for v in data if not lo <= v <= hi)
        raise _out_of_range(bad, lo, hi, dtype, name) from None


def _whole(value: float, lo: int, hi: int, dtype: DataType, name: str) -> int:
    if not value.is_integer():
        raise InvalidArgumentError(
            f"data of {dtype.name} input '{name}' must be whole numbers, got {value!r}"
        )
    if not lo <= value <= hi:  # exact: Python compares int and float without rounding
        raise _out_of_range(value, lo, hi, dtype, name)
    return int(value)


def _out_of_range(
    value: float, lo: int, hi: int, dtype: DataType, name: str
) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"data of input '{name}' does not fit datatype {dtype.name}: {value!r} is outside "
        f"[{lo}, {hi}]"
    )


__all__ = ["json_tensor"]
