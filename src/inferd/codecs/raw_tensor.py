"""The raw (binary) form of tensors, shared by the HTTP binary tensor extension and gRPC raw
contents: numeric tensors are their little-endian bytes in row-major order; BYTES tensors are,
per element in row-major order, a 4-byte little-endian length followed by that many bytes."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from math import prod
from typing import Any

import numpy as np

from inferd.core.datatypes import DataType
from inferd.errors import InvalidArgumentError

_LENGTH = struct.Struct("<I")


def tensor_from_buffer(
    blob: bytes | memoryview, dtype: DataType, shape: tuple[int, ...], what: str
) -> np.ndarray[Any, Any]:
    """The tensor held in ``blob``: a read-only view of it (``np.frombuffer``), except BYTES.

    ``what`` names the tensor in error messages, e.g. ``"input 'X' for model 'm'"``.
    """
    count = prod(shape)
    if dtype.is_bytes:
        return deserialize_bytes_elements(blob, count, what).reshape(shape)
    expected = count * dtype.itemsize
    if len(blob) != expected:
        raise InvalidArgumentError(
            f"unexpected size for {what}, expecting {expected} bytes (shape {list(shape)} of "
            f"{dtype.name}), got {len(blob)}"
        )
    return np.frombuffer(blob, dtype=dtype.dtype, count=count).reshape(shape)


def deserialize_bytes_elements(
    blob: bytes | memoryview, count: int, what: str
) -> np.ndarray[Any, Any]:
    """Split ``blob`` into exactly ``count`` elements (a flat object array of ``bytes``)."""
    # one copy of a body view up front; slicing bytes then yields each element with one copy
    data = blob if isinstance(blob, bytes) else bytes(blob)
    pos, end = 0, len(data)
    if count > end // 4:
        raise InvalidArgumentError(
            f"unexpected size for {what}: {count} BYTES elements need at least {4 * count} "
            f"bytes, got {end}"
        )
    items: list[bytes] = []
    unpack = _LENGTH.unpack_from
    for i in range(count):
        if end - pos < 4:
            raise InvalidArgumentError(
                f"unexpected size for {what}: BYTES data ends after {i} of {count} elements"
            )
        (length,) = unpack(data, pos)
        pos += 4
        if length > end - pos:
            raise InvalidArgumentError(
                f"unexpected size for {what}: element {i} claims {length} bytes but only "
                f"{end - pos} remain"
            )
        items.append(data[pos : pos + length])
        pos += length
    if pos != end:
        raise InvalidArgumentError(
            f"unexpected size for {what}: {end - pos} bytes left after the {count} BYTES "
            "elements of its shape"
        )
    out = np.empty(count, dtype=object)
    out[:] = items  # one assignment: much cheaper than setting the elements one by one
    return out


def serialize_bytes_elements(items: Iterable[Any]) -> bytes:
    """Encode elements (``bytes``; ``str`` as UTF-8; anything else as ``str(item)``)."""
    parts: list[bytes] = []
    pack = _LENGTH.pack
    for item in items:
        if type(item) is not bytes:  # the common case first: ``tolist()`` of a BYTES tensor
            if isinstance(item, str):
                item = item.encode()
            elif isinstance(item, (bytes, bytearray, memoryview)):
                item = bytes(item)
            else:
                item = str(item).encode()
        parts.append(pack(len(item)))
        parts.append(item)
    return b"".join(parts)


__all__ = ["deserialize_bytes_elements", "serialize_bytes_elements", "tensor_from_buffer"]
