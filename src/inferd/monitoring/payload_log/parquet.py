"""A Parquet payload log file: one row per logged request.

Columns: ``id``, ``model``, ``version``, ``timestamp`` (UTC, microseconds), ``parameters``
(JSON text), ``redacted`` (the names of the inputs left out), then one column per tensor,
``input.<name>`` and ``output.<name>``, each a struct of ``shape`` (list of int64) and ``data``
(the flat, row-major values as a list of the tensor's type; BYTES as binary, BF16 widened to
float32). Each tensor column's field metadata holds its v2 ``datatype``.

A file holds one set of tensor columns: a request with other tensors (an optional input left
out, a reloaded model with a new config) starts a new file. :func:`arrow_table` turns records
into Arrow columns (a batch at a time, joined from numpy arrays); the file writes them in row
groups of at least :data:`ROW_GROUP_ROWS` (pyarrow encodes and writes without the interpreter
lock). The file is written as ``.<name>.parquet.partial`` (hidden: readers of the folder,
pyarrow's datasets among them, skip it) and renamed to ``<name>.parquet`` once closed (its
footer written), so every ``.parquet`` file is complete. After a failed write (a full disk)
the file is finished if it can be and holds rows; otherwise the partial file is removed.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from inferd.core import datatypes
from inferd.errors import InferdError
from inferd.monitoring.payload_log.columns import Column, Uniform
from inferd.monitoring.payload_log.records import Captured

if TYPE_CHECKING:  # encode.py imports this module when it writes Parquet
    from inferd.monitoring.payload_log.encode import Chunk

__all__ = [
    "ROW_GROUP_ROWS",
    "Key",
    "ParquetSink",
    "arrow_table",
    "column_layout",
    "require_pyarrow",
    "schema_key",
    "uniform_table",
]

ROW_GROUP_ROWS = 4096
PARTIAL = ".partial"

Key = tuple[tuple[str, str, str], ...]  # (side, name, datatype) per tensor column


def require_pyarrow() -> Any:
    """The ``pyarrow`` module, or an error naming the extra that installs it."""
    try:
        import pyarrow
        import pyarrow.parquet  # the submodule, used through the package
    except ImportError:
        raise InferdError(
            "--payload-log-format parquet needs pyarrow: pip install 'inferd[parquet]'"
        ) from None
    return pyarrow


def schema_key(captured: Captured) -> Key:
    """The tensor columns a record needs."""
    key = [("input", n, datatypes.from_dtype(a.dtype).name) for n, a in captured.inputs.items()]
    key += [("output", n, datatypes.from_dtype(a.dtype).name) for n, a in captured.outputs.items()]
    return tuple(key)


def column_layout(captured: Captured) -> tuple[Any, ...]:
    """What decides a record's :func:`schema_key`, cheaper to build (records with equal
    layouts have equal keys)."""
    inputs, outputs = captured.inputs, captured.outputs
    return (
        captured.model,
        tuple(inputs),
        tuple([a.dtype for a in inputs.values()]),
        tuple(outputs),
        tuple([a.dtype for a in outputs.values()]),
    )


def _value_type(pa: Any, datatype: str) -> Any:
    if datatype == "BYTES":
        return pa.binary()
    if datatype == "BF16":
        return pa.float32()
    return pa.from_numpy_dtype(datatypes.from_name(datatype).dtype)


@functools.cache
def _timestamp_type() -> Any:
    """Microseconds in UTC (built once: naming a time zone costs pyarrow tens of µs)."""
    return require_pyarrow().timestamp("us", tz="UTC")


def _timestamps(pa: Any, times_ns: list[int]) -> Any:
    """The timestamp column, from the records' times (ns), without a conversion per value."""
    micros = np.array(times_ns, dtype=np.int64) // 1000
    return pa.Array.from_buffers(_timestamp_type(), len(micros), [None, pa.py_buffer(micros)])


@functools.lru_cache(maxsize=64)
def _schema(key: Key) -> Any:
    pa = require_pyarrow()
    fields = [
        pa.field("id", pa.string()),
        pa.field("model", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("timestamp", _timestamp_type()),
        pa.field("parameters", pa.string()),
        pa.field("redacted", pa.list_(pa.string())),
    ]
    for side, name, datatype in key:
        tensor = pa.struct(
            [
                pa.field("shape", pa.list_(pa.int64())),
                pa.field("data", pa.list_(_value_type(pa, datatype))),
            ]
        )
        fields.append(pa.field(f"{side}.{name}", tensor, metadata={"datatype": datatype}))
    return pa.schema(fields)


def _json_text(parameters: Mapping[str, Any]) -> str:
    return orjson.dumps(dict(parameters)).decode() if parameters else "{}"


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _list(pa: Any, offsets: Any, values: Any) -> Any:
    """A list array of ``values`` cut at ``offsets`` (int64, one more than the lists)."""
    if offsets[-1] < 2**31:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    large = pa.LargeListArray.from_arrays(pa.array(offsets), values)
    return large.cast(pa.list_(values.type))  # refused (counted as a write error) if too big


def _offsets(count: int, step: int) -> Any:
    """List offsets of ``count`` lists of ``step`` items each."""
    if not step:
        return np.zeros(count + 1, dtype=np.int64)
    return np.arange(0, (count + 1) * step, step, dtype=np.int64)


def _alike_column(pa: Any, column: Column, datatype: str, field: Any) -> Any:
    """A tensor column of records sharing one shape, from their stacked values."""
    value_type = field.type.field("data").type.value_type
    flat = column.values.reshape(-1)
    if datatype == "BF16":
        flat = flat.astype(np.float32)
    count, size, dims = len(column.values), column.values.shape[1], len(column.shape)
    data = _list(pa, _offsets(count, size), pa.array(flat, value_type))
    shape_values = pa.array(np.tile(np.asarray(column.shape, dtype=np.int64), count))
    shape = _list(pa, _offsets(count, dims), shape_values)
    return pa.StructArray.from_arrays([shape, data], fields=list(field.type))


def _tensor_column(pa: Any, arrays: list[np.ndarray[Any, Any]], datatype: str, field: Any) -> Any:
    shapes = [a.shape for a in arrays]
    if datatype != "BYTES" and len(set(shapes)) == 1:  # every row's lists are alike
        stacked = np.concatenate(arrays, axis=None).reshape(len(arrays), arrays[0].size)
        return _alike_column(pa, Column("", shapes[0], stacked), datatype, field)
    value_type = field.type.field("data").type.value_type
    flats = [a.reshape(-1) for a in arrays]
    if datatype == "BYTES":
        values = pa.array([_bytes(v) for f in flats for v in f.tolist()], value_type)
    else:
        joined = np.concatenate(flats)
        values = pa.array(joined.astype(np.float32) if datatype == "BF16" else joined, value_type)
    count = len(arrays)
    sizes = np.fromiter((a.size for a in arrays), dtype=np.int64, count=count)
    dims = np.fromiter((len(s) for s in shapes), dtype=np.int64, count=count)
    dim_values = np.fromiter((d for s in shapes for d in s), dtype=np.int64, count=int(dims.sum()))
    data = _list(pa, _counts_offsets(sizes), values)
    shape_column = _list(pa, _counts_offsets(dims), pa.array(dim_values))
    return pa.StructArray.from_arrays([shape_column, data], fields=list(field.type))


def _counts_offsets(counts: Any) -> Any:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def _head_columns(pa: Any, rows: Sequence[Captured]) -> list[Any]:
    """The columns before the tensors, record by record."""
    return [
        pa.array([r.id for r in rows], pa.string()),
        pa.array([r.model for r in rows], pa.string()),
        pa.array([r.version for r in rows], pa.int64()),
        _timestamps(pa, [r.time_ns for r in rows]),
        pa.array([_json_text(r.parameters) for r in rows], pa.string()),
        pa.array([list(r.redacted) for r in rows], pa.list_(pa.string())),
    ]


def arrow_table(key: Key, rows: Sequence[Captured]) -> Any:
    """``rows`` (all of the tensor columns ``key``) as one Arrow table."""
    pa = require_pyarrow()
    schema = _schema(key)
    columns = _head_columns(pa, rows)
    for index, (side, name, datatype) in enumerate(key):
        arrays = [(r.inputs if side == "input" else r.outputs)[name] for r in rows]
        columns.append(_tensor_column(pa, arrays, datatype, schema.field(6 + index)))
    return pa.Table.from_arrays(columns, schema=schema)


def uniform_table(key: Key, alike: Uniform) -> Any:
    """Records that are all alike (of the tensor columns ``key``) as one Arrow table, built a
    column at a time: the same table :func:`arrow_table` builds."""
    pa = require_pyarrow()
    schema = _schema(key)
    first, count = alike.first, len(alike.ids)
    parameters = alike.parameters
    if list(map(len, parameters)).count(0) == count:  # the usual case: none
        texts = ["{}"] * count
    else:
        texts = list(map(_json_text, parameters))
    redacted = list(first.redacted)
    columns: list[Any] = [
        pa.array(alike.ids, pa.string()),
        pa.array([first.model] * count, pa.string()),
        pa.array(np.full(count, first.version, dtype=np.int64)),
        _timestamps(pa, alike.times_ns),
        pa.array(texts, pa.string()),
        _list(pa, _offsets(count, len(redacted)), pa.array(redacted * count, pa.string())),
    ]
    for index, column in enumerate((*alike.inputs, *alike.outputs)):
        datatype = key[index][2]
        columns.append(_alike_column(pa, column, datatype, schema.field(6 + index)))
    return pa.Table.from_arrays(columns, schema=schema)


class ParquetSink:
    suffix = "parquet"

    def __init__(self, path: Path, key: Key) -> None:
        self._pa = require_pyarrow()
        self.path = path  # the final name; written as a hidden ".<name>.partial" until closed
        self._partial = path.with_name(f".{path.name}{PARTIAL}")
        self.key = key
        # opened exclusively: never another file's name, now or once renamed
        if path.exists():
            raise FileExistsError(path)
        self._file = self._partial.open("xb")
        try:
            self._writer = self._pa.parquet.ParquetWriter(self._file, _schema(key))
        except BaseException:
            self._file.close()
            self._partial.unlink()
            raise
        self._tables: list[Any] = []  # rows taken, not yet written
        self._pending = 0
        self._rows = 0  # rows in the row groups written
        self.size = 0

    @property
    def pending(self) -> int:
        """Rows taken but not yet written (they wait for a full row group or the close)."""
        return self._pending

    def accepts(self, chunk: Chunk) -> bool:
        return bool(chunk.key == self.key)

    def write(self, chunk: Chunk, start: int, room: int) -> tuple[int, int, int]:
        """Take the chunk's table (of this file's columns, taken whole: ``start`` is 0);
        once a row group's worth has gathered it is written (the size is known, and rotation
        checked, a row group at a time). Returns the rows taken, how many went into the file
        and the bytes it grew by."""
        table = chunk.table
        self._tables.append(table)
        self._pending += table.num_rows
        if self._pending < ROW_GROUP_ROWS:
            return table.num_rows, 0, 0
        return table.num_rows, *self._flush()

    def _flush(self) -> tuple[int, int]:
        if not self._pending:
            return 0, 0
        rows = self._pending
        table = self._pa.concat_tables(self._tables)  # written as one row group, uncopied
        self._writer.write_table(table, row_group_size=rows)
        self._tables = []
        self._pending = 0
        self._rows += rows
        return rows, self._grown()

    def _grown(self) -> int:
        size = os.fstat(self._file.fileno()).st_size
        grown, self.size = size - self.size, size
        return grown

    def close(self) -> tuple[int, int]:
        """Write what is pending and the footer, rename to the final name; return the records
        and bytes that closing wrote."""
        rows, grown = self._flush()
        self._writer.close()
        grown += self._grown()
        self._file.close()
        os.replace(self._partial, self.path)
        return rows, grown

    def abort(self) -> None:
        """Close after a failure, dropping the pending rows: the row groups already written
        are kept (renamed to the final name) when the footer can still be written and the
        file reads back; otherwise (no rows, or no footer) the partial file is removed."""
        self._tables = []
        self._pending = 0
        try:
            self._writer.close()
            self._file.close()
            finished = self._rows > 0 and self._readable()
        except Exception:
            finished = False
        with contextlib.suppress(Exception):
            self._file.close()
        if finished:
            os.replace(self._partial, self.path)
        else:
            with contextlib.suppress(FileNotFoundError):
                self._partial.unlink()

    def _readable(self) -> bool:
        """Whether the finished partial file's footer reads back (a failed write may have
        left it broken)."""
        try:
            self._pa.parquet.read_metadata(self._partial)
        except Exception:
            return False
        return True
