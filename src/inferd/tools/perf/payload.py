"""Tensors as the wire carries them: the v2 datatype of an input array, its raw little-endian
bytes (binary tensors, gRPC raw contents) and its v2 JSON ``data`` list."""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.codecs.raw_tensor import serialize_bytes_elements
from inferd.core.datatypes import from_dtype
from inferd.errors import InvalidArgumentError


def datatype_of(array: np.ndarray) -> str:
    """The v2 datatype name of an input array (object arrays of ``bytes`` are BYTES)."""
    return "BYTES" if array.dtype == object else from_dtype(array.dtype).name


def raw_bytes(array: np.ndarray) -> bytes:
    """Row-major little-endian bytes; BYTES as a 4-byte length then the bytes, per element."""
    if array.dtype == object:
        return serialize_bytes_elements(array.ravel().tolist())
    little = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    return np.ascontiguousarray(array, dtype=little).tobytes()


def json_data(array: np.ndarray, name: str) -> list[Any]:
    """The flat v2 JSON ``data`` of an input (BYTES as UTF-8 text)."""
    datatype = datatype_of(array)
    if datatype in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"input '{name}' is {datatype}, which v2 JSON cannot carry: use http-binary or grpc"
        )
    if datatype == "BYTES":
        try:
            return [item.decode() for item in array.ravel().tolist()]
        except UnicodeDecodeError:
            raise InvalidArgumentError(
                f"input '{name}' holds bytes that are not UTF-8 text, which v2 JSON cannot "
                "carry: use http-binary or grpc"
            ) from None
    flat: list[Any] = array.ravel().tolist()
    return flat
