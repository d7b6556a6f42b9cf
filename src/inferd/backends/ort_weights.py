"""One copy of an ONNX model's weights for all of its ONNX Runtime sessions.

ONNX Runtime copies the weights of an ``.onnx`` file into every session it builds from it, and a
model gets one session per instance, plus a solo session (:mod:`inferd.backends.onnxruntime`).
Each build also parses the whole file first, so a load holds about the file's size again for a
while beyond what it keeps. For a model of two sessions or more on the host, the backend builds
its sessions from a copy of the model whose large weights are marked as external data at their
place in the file (a few hundred KiB for all-MiniLM-L6-v2), so no session parses the weights:

- a weight ONNX Runtime *keeps as it is* (an embedding table, a bias, a norm's scale) is read
  once into an array of the backend's, which every session uses in place
  (``SessionOptions.add_initializer``);
- a weight it *repacks* (a matrix product's) each session reads from the file while it is
  built and owns only in its repacked form, as it would have.

Which is which, the first session tells (:func:`first_session`), and the answer is kept per
file. No session maps the file once built: a file overwritten while the model is loaded changes
nothing until the model is loaded again. Measured with ``bench/onnx_external_data.py``, see
``docs/backends.md``.

Where the file is read as ``ModelProto`` → ``graph`` → ``initializer`` → ``raw_data``, this module
walks protobuf's wire format itself: no protobuf library gives a field's place in its file. The
pieces around the weights are parsed by ``onnx``'s own classes.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Callable, Iterable, Iterator
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


@dataclass(frozen=True)
class _Weight:
    offset: int  # its bytes in the file: [offset, offset + size)
    size: int
    dtype: np.dtype[Any]
    dims: tuple[int, ...]


class SharedWeights:
    """The model with its large weights marked as external data at their place in the file
    (:attr:`model`), and those of them read once for every session (:meth:`share`)."""

    def __init__(self, path: Path, *, min_bytes: int = MIN_SHARED_BYTES) -> None:
        self.path = path
        self.folder = str(path.parent)
        self.weights: dict[str, _Weight] = {}
        self._values: dict[str, ort.OrtValue] = {}
        self._known = False  # whether the weights to share are known (the first session's)
        self._lock = threading.Lock()
        with open(path, "rb") as f, _mapped(f) as data:
            model = onnx.ModelProto()
            graph = onnx.GraphProto()
            for field in _fields(data, 0, len(data)):
                if field.number != _MODEL_GRAPH:
                    model.MergeFromString(data[field.start : field.end])
                    continue
                for part in _fields(data, field.value, field.end):
                    if part.number == _GRAPH_INITIALIZER:
                        graph.initializer.append(self._initializer(data, part, min_bytes))
                    else:
                        graph.MergeFromString(data[part.start : part.end])
            if not self.weights:
                raise NotShareable(f"no weight of {min_bytes} bytes or more inside {path.name}")
            model.graph.CopyFrom(graph)
        self.model = model.SerializeToString()

    def _initializer(self, data: Any, part: _Field, min_bytes: int) -> onnx.TensorProto:
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
        self.weights[tensor.name] = _Weight(raw.value, size, dtype, tuple(tensor.dims))
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", self.path.name), ("offset", raw.value), ("length", size)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        return tensor

    @property
    def shared(self) -> frozenset[str]:
        """The weights read once for every session."""
        return frozenset(self._values)

    @property
    def nbytes(self) -> int:
        """The bytes read once for every session."""
        return sum(self.weights[name].size for name in self._values)

    def share(self, names: Iterable[str]) -> None:
        """Read the weights ``names`` into private arrays that every session uses in place (the
        others each session reads from the file while it is built, and owns)."""
        with open(self.path, "rb") as f:
            for name in names:
                weight = self.weights[name]
                array = np.empty(weight.dims, weight.dtype)
                f.seek(weight.offset)
                if f.readinto(array.reshape(-1).view(np.uint8).data) != weight.size:
                    raise NotShareable(f"the file ends inside weight '{name}'")
                self._values[name] = ort.OrtValue.ortvalue_from_numpy(array)

    def within(self, ranges: Iterable[tuple[int, int]]) -> set[str]:
        """The weights whose bytes lie inside one of the file ranges ``ranges``."""
        spans = list(ranges)
        return {
            name
            for name, w in self.weights.items()
            if any(lo <= w.offset and w.offset + w.size <= hi for lo, hi in spans)
        }

    def session(
        self, options: Callable[[], ort.SessionOptions], providers: list[Any], level: int
    ) -> ort.InferenceSession:
        """A session on these weights (``options``: fresh options each call); the first one
        finds out which weights to share (:func:`first_session`)."""
        with self._lock:
            if not self._known:
                first = first_session(self, options(), providers, level)
                self._known = True
                if first is not None:
                    return first
        return ort.InferenceSession(self.model, self.apply(options()), providers=providers)

    def apply(self, options: ort.SessionOptions) -> ort.SessionOptions:
        """Give ``options`` the shared weights (ONNX Runtime keeps a reference to each)."""
        options.add_session_config_entry(FOLDER_ENTRY, self.folder)
        for name, value in self._values.items():
            options.add_initializer(name, value)
        return options


def mapped_ranges(path: Path) -> set[tuple[int, int]] | None:
    """The ranges of ``path`` (file offsets) this process has mapped; None where the process's
    maps cannot be read (not Linux)."""
    try:
        text = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    target = os.path.realpath(path)
    found = set()
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5] == target:
            low, high = (int(x, 16) for x in parts[0].split("-"))
            offset = int(parts[2], 16)
            found.add((offset, offset + high - low))
    return found


# (device, inode, size, modification time, graph optimization level) of a model file -> the
# weights ONNX Runtime keeps as they are (the others it repacks into buffers of its own)
_KEPT: dict[tuple[int, ...], frozenset[str]] = {}


def first_session(
    weights: SharedWeights, options: ort.SessionOptions, providers: list[Any], level: int
) -> ort.InferenceSession | None:
    """Find out which weights ONNX Runtime keeps as they are and :meth:`~SharedWeights.share`
    those; return the session built to find out where it can serve (None: build another).

    The session is built with every large weight read from the file. ONNX Runtime maps each
    such weight from the file; a weight it repacks (a matrix product's) it unmaps once repacked,
    one it keeps stays mapped. Those still mapped are shared: a session that mapped the file
    for good would read whatever the file holds if it were overwritten. The answer is kept per
    file, so a reload of an unchanged file builds no extra session.
    """
    stat = weights.path.stat()
    key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, level)
    kept = _KEPT.get(key)
    if kept is not None:
        weights.share(kept)
        return None
    before = mapped_ranges(weights.path)
    session = ort.InferenceSession(weights.model, weights.apply(options), providers=providers)
    after = mapped_ranges(weights.path)
    if before is None or after is None:  # no way to tell: share them all
        kept = frozenset(weights.weights)
    else:
        kept = frozenset(weights.within(after - before))
    _KEPT[key] = kept
    if not kept:
        return session
    del session  # it maps the file for what it kept
    weights.share(kept)
    return None
