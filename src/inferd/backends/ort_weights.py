"""One copy of an ONNX model's weights for all of its ONNX Runtime sessions.

ONNX Runtime copies the weights of an ``.onnx`` file into every session it builds from it, and a
model gets one session per instance, plus a solo session (:mod:`inferd.backends.onnxruntime`).
Each build also parses the whole file first, so a load holds about the file's size again for a
while beyond what it keeps. For a model of two sessions or more on the host, the backend reads
each large weight once, straight from the file into its own array (no parse of the whole file),
and hands the arrays to every session with ``SessionOptions.add_initializer``, which uses them
in place. The sessions are built from a copy of the model without those weights (a few hundred
KiB for all-MiniLM-L6-v2), whose initializers name their place in the file as external data.

What stays per session is what ONNX Runtime repacks for its matrix products. Measured on
all-MiniLM-L6-v2 with three sessions (``bench/onnx_shared_weights.py``): see
``docs/backends.md``. The arrays are private memory: a file overwritten while the model is
loaded changes nothing until the model is loaded again.

Where the file is read as ``ModelProto`` → ``graph`` → ``initializer`` → ``raw_data``, this module
walks protobuf's wire format itself: no protobuf library gives a field's place in its file. The
pieces around the weights are parsed by ``onnx``'s own classes.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx.helper import tensor_dtype_to_np_dtype

# the fields this module finds by number (onnx.proto3)
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_DATA_TYPE = 2
_TENSOR_RAW_DATA = 9
_LENGTH_DELIMITED = 2

MIN_SHARED_BYTES = 1024  # smaller weights stay inside the model each session parses
FOLDER_ENTRY = "session.model_external_initializers_file_folder_path"


class NotShareable(ValueError):
    """The file holds nothing to share (no large weights inline) or is not as expected."""


@dataclass(frozen=True)
class _Field:
    number: int
    start: int  # the field's first byte (its key)
    value: int  # a length-delimited field's payload: [value, end)
    end: int


def _varint(data: Any, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(data):
            raise NotShareable("the file ends inside a field")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise NotShareable("a varint longer than 10 bytes")


def _fields(data: Any, start: int, end: int) -> Iterator[_Field]:
    i = start
    while i < end:
        first = i
        key, i = _varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = _varint(data, i)
            value = i
        elif wire == 1:
            value = i = i + 8
        elif wire == 5:
            value = i = i + 4
        elif wire == _LENGTH_DELIMITED:
            size, value = _varint(data, i)
            i = value + size
        else:
            raise NotShareable(f"wire type {wire} at byte {first}")
        if i > end:
            raise NotShareable(f"a field at byte {first} runs past its message")
        yield _Field(key >> 3, first, value, i)


def _dtype(data_type: int) -> np.dtype[Any] | None:
    try:
        dtype = np.dtype(tensor_dtype_to_np_dtype(data_type))
    except (KeyError, TypeError, ValueError):
        return None
    return dtype.newbyteorder("<") if dtype.kind in "fiub" else None


@contextmanager
def _mapped(f: Any) -> Iterator[mmap.mmap]:
    try:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except ValueError as exc:  # an empty file
        raise NotShareable(str(exc)) from exc
    with data:
        yield data


class SharedWeights:
    """The model without its large weights, and those weights, read once."""

    def __init__(self, path: Path, *, min_bytes: int = MIN_SHARED_BYTES) -> None:
        self.folder = str(path.parent)
        self._values: dict[str, ort.OrtValue] = {}
        with open(path, "rb") as f, _mapped(f) as data:
            model = onnx.ModelProto()
            graph = onnx.GraphProto()
            for field in _fields(data, 0, len(data)):
                if field.number != _MODEL_GRAPH:
                    model.MergeFromString(data[field.start : field.end])
                    continue
                for part in _fields(data, field.value, field.end):
                    if part.number == _GRAPH_INITIALIZER:
                        graph.initializer.append(self._initializer(f, data, part, path, min_bytes))
                    else:
                        graph.MergeFromString(data[part.start : part.end])
            if not self._values:
                raise NotShareable(f"no weight of {min_bytes} bytes or more inside {path.name}")
            model.graph.CopyFrom(graph)
        self.model = model.SerializeToString()
        self.nbytes = sum(int(v.numpy().nbytes) for v in self._values.values())

    def _initializer(
        self, f: Any, data: Any, part: _Field, path: Path, min_bytes: int
    ) -> onnx.TensorProto:
        raw = next(
            (t for t in _fields(data, part.value, part.end) if t.number == _TENSOR_RAW_DATA), None
        )
        if raw is None or raw.end - raw.value < min_bytes:
            return onnx.TensorProto.FromString(data[part.value : part.end])
        tensor = onnx.TensorProto.FromString(
            data[part.value : raw.start] + data[raw.end : part.end]
        )
        dtype = _dtype(tensor.data_type)
        if dtype is None:  # a type numpy lacks (bfloat16, float8...): the session parses it
            return onnx.TensorProto.FromString(data[part.value : part.end])
        size = raw.end - raw.value
        if dtype.itemsize * int(np.prod(tensor.dims, dtype=np.int64)) != size:
            raise NotShareable(f"weight '{tensor.name}' holds {size} bytes, not its shape's")
        array = np.empty(tuple(tensor.dims), dtype)
        f.seek(raw.value)
        if f.readinto(array.reshape(-1).view(np.uint8).data) != size:
            raise NotShareable(f"the file ends inside weight '{tensor.name}'")
        self._values[tensor.name] = ort.OrtValue.ortvalue_from_numpy(array)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", path.name), ("offset", raw.value), ("length", size)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        return tensor

    def apply(self, options: ort.SessionOptions) -> ort.SessionOptions:
        """Give ``options`` the shared weights (ONNX Runtime keeps a reference to each)."""
        options.add_session_config_entry(FOLDER_ENTRY, self.folder)
        for name, value in self._values.items():
            options.add_initializer(name, value)
        return options
