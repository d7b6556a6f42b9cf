"""Tensors held in shared-memory regions (Triton's shared-memory extension), for both codecs.

A request names a region, an offset inside it and a byte size per tensor (the parameters
``shared_memory_region``, ``shared_memory_offset``, ``shared_memory_byte_size``). The codecs stay
pure: they never open or map memory. They are handed a :class:`SharedMemoryResolver` (the
server's registry of regions) that checks the bounds and copies bytes in and out of a region.
An input is copied once, into a fresh buffer the request owns (``np.frombuffer`` over it, no
further copy); an output is copied once, into the region, when the response is encoded.

The rules shared by HTTP and gRPC live here, so both refuse the same mistakes in the same words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from inferd.codecs.raw_tensor import serialize_bytes_elements, tensor_from_buffer
from inferd.core import datatypes
from inferd.core.datatypes import DataType
from inferd.core.inference import OutputBuffer
from inferd.errors import InvalidArgumentError, UnsupportedError

__all__ = [
    "KEYS",
    "REGION",
    "SharedMemoryResolver",
    "ShmParams",
    "input_tensor",
    "output_buffer",
    "shm_params",
    "write_output",
]

REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"
KEYS = (REGION, OFFSET, BYTE_SIZE)


class SharedMemoryResolver(Protocol):
    """What the codecs need from the server's shared-memory registry."""

    def read(self, region: str, offset: int, byte_size: int) -> memoryview:
        """A copy of ``byte_size`` bytes at ``offset`` of registered region ``region``, in a
        fresh buffer; raises :class:`~inferd.errors.InferdError` for an unknown region, a window
        out of bounds or a region that can no longer be read."""
        ...

    def writer(self, region: str, offset: int, byte_size: int) -> Callable[[memoryview], None]:
        """Check the window now; return what writes bytes at its start later (raising
        :class:`~inferd.errors.InferdError` when the region can no longer take them)."""
        ...


@dataclass(frozen=True, slots=True)
class ShmParams:
    region: str
    offset: int
    byte_size: int


def _uint(value: object, key: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"'{key}' of {what} must be a non-negative integer")
    return value


def shm_params(
    region: object = None, offset: object = None, byte_size: object = None, *, what: str
) -> ShmParams | None:
    """The shared-memory parameters of one tensor (``None`` values are absent), or ``None``
    when the tensor does not use shared memory. ``what`` names it: ``"input 'X'"``."""
    if region is None:
        for key, value in ((OFFSET, offset), (BYTE_SIZE, byte_size)):
            if value is not None:
                raise InvalidArgumentError(f"'{key}' of {what} needs '{REGION}' as well")
        return None
    if not isinstance(region, str) or not region:
        raise InvalidArgumentError(f"'{REGION}' of {what} must be a non-empty string")
    if byte_size is None:
        raise InvalidArgumentError(f"{what} sets '{REGION}' but not '{BYTE_SIZE}'")
    return ShmParams(
        region,
        0 if offset is None else _uint(offset, OFFSET, what),
        _uint(byte_size, BYTE_SIZE, what),
    )


def _resolver(resolver: SharedMemoryResolver | None, what: str) -> SharedMemoryResolver:
    if resolver is None:
        raise UnsupportedError(
            f"{what} uses shared memory, which is not enabled on this server; send the data "
            "in the request instead"
        )
    return resolver


def input_tensor(
    resolver: SharedMemoryResolver | None,
    params: ShmParams,
    dtype: DataType,
    shape: tuple[int, ...],
    what: str,
) -> np.ndarray[Any, Any]:
    """The input held in the region, copied once into an array the request owns. Its byte
    size must be exactly what ``shape`` of ``dtype`` takes."""
    data = _resolver(resolver, what).read(params.region, params.offset, params.byte_size)
    return tensor_from_buffer(data, dtype, shape, f"{what} in shared memory '{params.region}'")


def output_buffer(
    resolver: SharedMemoryResolver | None, params: ShmParams, name: str, classification: object
) -> OutputBuffer:
    """The window requested output ``name`` goes to, checked when the request is decoded. An
    output asked for in shared memory takes no ``classification`` (Triton refuses it too)."""
    if classification:
        raise InvalidArgumentError(
            f"output '{name}' can't set both '{REGION}' and 'classification'"
        )
    what = f"output '{name}'"
    write = _resolver(resolver, what).writer(params.region, params.offset, params.byte_size)
    return OutputBuffer(params.region, params.byte_size, write)


def write_output(target: OutputBuffer, name: str, array: np.ndarray[Any, Any]) -> DataType:
    """Copy output ``name`` into its window (little-endian, row-major; BYTES serialised as on
    the wire) with one write; return its datatype. Refused when the window is too small to
    hold it."""
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    dtype = datatypes.from_dtype(array.dtype)
    if dtype.is_bytes:
        blob = serialize_bytes_elements(array.reshape(-1).tolist())
        _check_fits(target, name, len(blob))
        if blob:
            target.write(memoryview(blob))
        return dtype
    _check_fits(target, name, array.nbytes)
    if array.size:  # row-major bytes: no copy when the array is contiguous already
        target.write(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
    return dtype


def _check_fits(target: OutputBuffer, name: str, needed: int) -> None:
    if needed > target.byte_size:
        raise InvalidArgumentError(
            f"shared memory size specified with the request for output '{name}' "
            f"({target.byte_size} bytes) should be at least {needed} bytes to hold the results"
        )
