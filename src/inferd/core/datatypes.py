"""The single datatype table: protocol name <-> numpy dtype <-> model-config enum name.

BYTES tensors are numpy object arrays whose elements are ``bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from inferd.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True)
class DataType:
    name: str  # protocol name, e.g. "INT32"
    config_name: str  # model config enum name, e.g. "TYPE_INT32"
    dtype: np.dtype
    itemsize: int  # bytes per element; 0 for BYTES (variable)
    grpc_field: str | None  # typed InferTensorContents field, None when raw only
    config_code: int  # the number of ``config_name`` in the model config's DataType enum

    @property
    def is_bytes(self) -> bool:
        return self.itemsize == 0


_TABLE = (
    DataType("BOOL", "TYPE_BOOL", np.dtype(np.bool_), 1, "bool_contents", 1),
    DataType("UINT8", "TYPE_UINT8", np.dtype(np.uint8), 1, "uint_contents", 2),
    DataType("UINT16", "TYPE_UINT16", np.dtype(np.uint16), 2, "uint_contents", 3),
    DataType("UINT32", "TYPE_UINT32", np.dtype(np.uint32), 4, "uint_contents", 4),
    DataType("UINT64", "TYPE_UINT64", np.dtype(np.uint64), 8, "uint64_contents", 5),
    DataType("INT8", "TYPE_INT8", np.dtype(np.int8), 1, "int_contents", 6),
    DataType("INT16", "TYPE_INT16", np.dtype(np.int16), 2, "int_contents", 7),
    DataType("INT32", "TYPE_INT32", np.dtype(np.int32), 4, "int_contents", 8),
    DataType("INT64", "TYPE_INT64", np.dtype(np.int64), 8, "int64_contents", 9),
    DataType("FP16", "TYPE_FP16", np.dtype(np.float16), 2, None, 10),
    DataType("FP32", "TYPE_FP32", np.dtype(np.float32), 4, "fp32_contents", 11),
    DataType("FP64", "TYPE_FP64", np.dtype(np.float64), 8, "fp64_contents", 12),
    DataType("BF16", "TYPE_BF16", np.dtype(ml_dtypes.bfloat16), 2, None, 14),
    DataType("BYTES", "TYPE_STRING", np.dtype(object), 0, "bytes_contents", 13),
)

BY_NAME: dict[str, DataType] = {d.name: d for d in _TABLE}
BY_CONFIG_NAME: dict[str, DataType] = {d.config_name: d for d in _TABLE}
_BY_DTYPE: dict[np.dtype, DataType] = {d.dtype: d for d in _TABLE}

BYTES = BY_NAME["BYTES"]
ALL = _TABLE


def from_name(name: str) -> DataType:
    """Look up a protocol datatype name such as ``"FP32"``; raise a clear error if unknown."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise InvalidArgumentError(
            f"invalid datatype '{name}': expected one of {', '.join(BY_NAME)}"
        ) from None


def from_config_name(name: str) -> DataType:
    try:
        return BY_CONFIG_NAME[name]
    except KeyError:
        raise InvalidArgumentError(f"unsupported model config data type '{name}'") from None


def from_dtype(dtype: np.dtype) -> DataType:
    """The datatype of a numpy array; str/bytes/object arrays are BYTES."""
    found = _BY_DTYPE.get(dtype)
    if found is not None:
        return found
    if dtype.kind in ("S", "U", "O"):
        return BYTES
    raise InvalidArgumentError(f"numpy dtype {dtype} has no inference protocol datatype")
