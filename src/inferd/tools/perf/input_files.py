"""Input data read from files: perf_analyzer's JSON format and raw-file directories, ``.npz``
archives and ``.parquet`` tables.

- JSON (perf_analyzer's documented format): ``{"data": [ENTRY, ...]}`` for one stream or
  ``{"data": [[ENTRY, ...], [ENTRY, ...]]}`` for one stream per sequence. An ENTRY maps every
  input name to a flat (or nested) list in row-major order, to ``{"b64": "..."}`` (little-endian
  bytes; BYTES elements each as a 4-byte length and the bytes), or to ``{"content": LIST or
  {"b64": ...}, "shape": [...]}``.
- A directory: one file per input, named like the input, holding one sample's raw bytes.
- ``.npz``: one array per input name; the first dimension numbers the samples.
- ``.parquet``: one column per input, one row per sample; a list column is reshaped to the
  input's shape (``--shape`` for variable dims); a scalar column gives samples of one element.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Sequence
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from inferd.core.datatypes import DataType
from inferd.errors import InvalidArgumentError
from inferd.tools.perf.shapes import Shapes, fits, numpy_dtype, resolve_shape
from inferd.tools.perf.transport import ModelInfo, RequestData, TensorInfo

Streams = list[tuple[RequestData, ...]]


def read_file(model: ModelInfo, path: Path, shapes: Shapes) -> Streams:
    """The streams of requests held in ``path`` (kind chosen by what the path is)."""
    if path.is_dir():
        return [(read_directory(model, path, shapes),)]
    if not path.is_file():
        raise InvalidArgumentError(
            f"--input-data {path}: no such file or directory (or use random or zero)"
        )
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return [read_npz(model, path)]
    if suffix == ".parquet":
        return [read_parquet(model, path, shapes)]
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgumentError(
            f"--input-data {path}: not a JSON document ({exc}); files ending .npz and .parquet "
            "are read as such, directories as one raw file per input"
        ) from None
    return parse_json_data(model, document, shapes, where=str(path))


# --- perf_analyzer JSON -----------------------------------------------------------------------


def parse_json_data(model: ModelInfo, document: Any, shapes: Shapes, where: str) -> Streams:
    """The streams of a perf_analyzer input-data document."""
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise InvalidArgumentError(f'{where}: expected an object with a "data" list')
    extra = set(document) - {"data"}
    if extra:
        raise InvalidArgumentError(
            f'{where}: {", ".join(sorted(extra))} not supported (only "data" is read)'
        )
    data = document["data"]
    nested = [isinstance(item, list) for item in data]
    if any(nested) and not all(nested):
        raise InvalidArgumentError(
            f'{where}: "data" mixes entries and lists of entries; use one form'
        )
    streams = data if data and all(nested) else [data]
    return [
        tuple(
            _json_entry(model, entry, shapes, f"{where}: stream {s} entry {i}")
            for i, entry in enumerate(stream)
        )
        for s, stream in enumerate(streams)
    ]


def _json_entry(model: ModelInfo, entry: Any, shapes: Shapes, where: str) -> RequestData:
    if not isinstance(entry, dict):
        raise InvalidArgumentError(f"{where}: expected an object mapping input names to data")
    known = {t.name for t in model.inputs}
    unknown = set(entry) - known
    if unknown:
        raise InvalidArgumentError(
            f"{where}: model '{model.name}' has no input {', '.join(sorted(unknown))}"
        )
    tensors = {}
    for tensor in model.inputs:
        if tensor.name not in entry:
            raise InvalidArgumentError(f"{where}: no data for input '{tensor.name}'")
        tensors[tensor.name] = _json_tensor(tensor, entry[tensor.name], shapes, where)
    return RequestData(tensors)


def _json_tensor(tensor: TensorInfo, value: Any, shapes: Shapes, where: str) -> np.ndarray:
    what = f"{where}, input '{tensor.name}'"
    given = None
    if isinstance(value, dict) and "content" in value:
        given = value.get("shape")
        if given is not None and (
            not isinstance(given, list) or not all(isinstance(d, int) and d >= 0 for d in given)
        ):
            raise InvalidArgumentError(f'{what}: "shape" must be a list of non-negative ints')
        value = value["content"]
    shape = resolve_shape(tensor, shapes, given)
    dtype = numpy_dtype(tensor)
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise InvalidArgumentError(f'{what}: expected a list, {{"b64": ...}} or "content"')
        try:
            blob = base64.b64decode(value["b64"], validate=True)
        except binascii.Error:
            raise InvalidArgumentError(f"{what}: the b64 text is not valid base64") from None
        return tensor_from_bytes(blob, dtype, shape, what)
    if not isinstance(value, list):
        raise InvalidArgumentError(f'{what}: expected a list, {{"b64": ...}} or "content"')
    flat = _flatten(value)
    if len(flat) != prod(shape):
        raise InvalidArgumentError(
            f"{what}: {len(flat)} values, but the shape {list(shape)} holds {prod(shape)}"
        )
    return array_of(flat, dtype, what).reshape(shape)


def _flatten(value: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in value:
        if isinstance(item, list):
            out += _flatten(item)
        else:
            out.append(item)
    return out


def array_of(values: Sequence[Any], dtype: DataType, what: str) -> np.ndarray:
    """A flat array of ``dtype`` from Python values (BYTES: ``str`` as UTF-8, or ``bytes``)."""
    if dtype.is_bytes:
        out = np.empty(len(values), dtype=object)
        items = []
        for v in values:
            if isinstance(v, str):
                items.append(v.encode())
            elif isinstance(v, bytes):
                items.append(v)
            else:
                raise InvalidArgumentError(f"{what}: BYTES data must be strings, got {v!r}")
        out[:] = items
        return out
    if dtype.dtype.kind == "b" and not all(isinstance(v, bool) for v in values):
        raise InvalidArgumentError(f"{what}: BOOL data must be true or false")
    if dtype.dtype.kind in "iu" and not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values
    ):
        raise InvalidArgumentError(f"{what}: {dtype.name} data must be whole numbers")
    try:
        return np.asarray(values, dtype=dtype.dtype)
    except (OverflowError, ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"{what}: values do not fit {dtype.name} ({exc})") from None


_LENGTH = struct.Struct("<I")


def split_bytes_elements(blob: bytes, what: str) -> list[bytes]:
    """The elements of a serialised BYTES tensor (each a 4-byte length, then the bytes)."""
    items, pos = [], 0
    while pos < len(blob):
        if len(blob) - pos < 4:
            raise InvalidArgumentError(f"{what}: BYTES data ends inside an element's length")
        (length,) = _LENGTH.unpack_from(blob, pos)
        pos += 4
        if length > len(blob) - pos:
            raise InvalidArgumentError(f"{what}: a BYTES element runs past the end of the data")
        items.append(blob[pos : pos + length])
        pos += length
    return items


def tensor_from_bytes(
    blob: bytes, dtype: DataType, shape: tuple[int, ...], what: str
) -> np.ndarray:
    """One sample from its raw little-endian bytes (a copy, so the array is writable)."""
    if dtype.is_bytes:
        items = split_bytes_elements(blob, what)
        if len(items) != prod(shape):
            raise InvalidArgumentError(
                f"{what}: {len(items)} BYTES elements, but the shape {list(shape)} holds "
                f"{prod(shape)}"
            )
        return array_of(items, dtype, what).reshape(shape)
    expected = prod(shape) * dtype.itemsize
    if len(blob) != expected:
        raise InvalidArgumentError(
            f"{what}: {len(blob)} bytes, but the shape {list(shape)} of {dtype.name} needs "
            f"{expected}"
        )
    little = dtype.dtype.newbyteorder("<") if dtype.dtype.kind != "V" else dtype.dtype
    return np.frombuffer(blob, dtype=little).astype(dtype.dtype).reshape(shape)


# --- raw files, npz, parquet ------------------------------------------------------------------


def read_directory(model: ModelInfo, path: Path, shapes: Shapes) -> RequestData:
    """One request from a directory holding one raw file per input (perf_analyzer's form)."""
    tensors = {}
    for tensor in model.inputs:
        file = path / tensor.name
        if not file.is_file():
            raise InvalidArgumentError(f"--input-data {path}: no file for input '{tensor.name}'")
        shape = resolve_shape(tensor, shapes)
        what = f"{file}"
        tensors[tensor.name] = tensor_from_bytes(
            file.read_bytes(), numpy_dtype(tensor), shape, what
        )
    return RequestData(tensors)


def _as_input(array: np.ndarray, tensor: TensorInfo, what: str) -> np.ndarray:
    """``array`` converted to the input's datatype (text kinds to BYTES elements)."""
    dtype = numpy_dtype(tensor)
    if dtype.is_bytes:
        if array.dtype.kind not in "USO":
            raise InvalidArgumentError(f"{what}: BYTES input needs strings, got {array.dtype}")
        return array_of(array.ravel().tolist(), dtype, what).reshape(array.shape)
    if array.dtype.kind in "USO":
        raise InvalidArgumentError(f"{what}: {dtype.name} input cannot take {array.dtype} data")
    return array.astype(dtype.dtype)


def read_npz(model: ModelInfo, path: Path) -> tuple[RequestData, ...]:
    """One request per index of the first dimension, shared by every input's array."""
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(
            f"--input-data {path}: cannot read the archive ({exc})"
        ) from None
    with archive:
        missing = [t.name for t in model.inputs if t.name not in archive.files]
        if missing:
            raise InvalidArgumentError(
                f"--input-data {path}: no array for input {', '.join(missing)} "
                f"(the archive holds {', '.join(archive.files) or 'nothing'})"
            )
        arrays = {}
        for tensor in model.inputs:
            what = f"{path}, input '{tensor.name}'"
            try:
                array = archive[tensor.name]
            except ValueError as exc:  # object arrays need pickles, which are refused
                raise InvalidArgumentError(f"{what}: {exc}; store strings as str arrays") from None
            if array.ndim == 0 or not fits(tensor, array.shape[1:]):
                raise InvalidArgumentError(
                    f"{what}: array of shape {list(array.shape)}; expected the samples along "
                    f"the first dimension, each of shape {list(tensor.shape)}"
                )
            arrays[tensor.name] = _as_input(array, tensor, what)
    counts = {a.shape[0] for a in arrays.values()}
    if len(counts) != 1:
        raise InvalidArgumentError(
            f"--input-data {path}: the arrays hold different numbers of samples "
            f"({', '.join(f'{n}: {a.shape[0]}' for n, a in arrays.items())})"
        )
    return tuple(
        RequestData({name: a[i] for name, a in arrays.items()}) for i in range(counts.pop())
    )


def read_parquet(model: ModelInfo, path: Path, shapes: Shapes) -> tuple[RequestData, ...]:
    """One request per row; each input's column reshaped to the input's shape."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InvalidArgumentError(
            "reading .parquet input data needs pyarrow: pip install 'inferd[perf]'"
        ) from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"--input-data {path}: cannot read the table ({exc})") from None
    missing = [t.name for t in model.inputs if t.name not in table.column_names]
    if missing:
        raise InvalidArgumentError(
            f"--input-data {path}: no column for input {', '.join(missing)} "
            f"(the table has {', '.join(table.column_names)})"
        )
    columns = {}
    for tensor in model.inputs:
        what = f"{path}, column '{tensor.name}'"
        values = table.column(tensor.name).to_pylist()
        if any(v is None for v in values):
            raise InvalidArgumentError(f"{what}: has empty (null) cells")
        shape = resolve_shape(tensor, shapes)  # variable dims: names the input and --shape
        columns[tensor.name] = [
            _parquet_cell(cell, tensor, shape, f"{what}, row {row}")
            for row, cell in enumerate(values)
        ]
    return tuple(
        RequestData({name: cells[row] for name, cells in columns.items()})
        for row in range(table.num_rows)
    )


def _parquet_cell(cell: Any, tensor: TensorInfo, shape: tuple[int, ...], what: str) -> np.ndarray:
    flat = _flatten(cell) if isinstance(cell, list) else [cell]
    if len(flat) != prod(shape):
        raise InvalidArgumentError(
            f"{what}: {len(flat)} values, but the shape {list(shape)} holds {prod(shape)} "
            f"(set it with --shape {tensor.name}:D1,D2,...)"
        )
    return array_of(flat, numpy_dtype(tensor), what).reshape(shape)
