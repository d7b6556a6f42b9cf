"""Reference data for a profile: rows of a model's inputs (and maybe outputs) from a file.

- ``.npz``: one array per tensor, named like the model's input or output, rows first.
- ``.parquet`` or ``.csv``: a column named like a tensor holds it (a scalar per row, or a list
  per row in Parquet). The other columns, when one input is left without a column of its own,
  are that input's values in file order (a training table with one column per feature), and
  their names become the features' names. Columns named with ``exclude`` (labels, ids) are
  ignored.

Every problem is one :class:`InvalidArgumentError` line naming the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from inferd.core.model_spec import TensorSpec
from inferd.errors import InvalidArgumentError

__all__ = ["ReferenceData", "read_reference"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class ReferenceData:
    arrays: dict[str, Array]  # tensor name -> rows
    names: dict[str, tuple[str, ...]]  # tensor name -> its columns' names, when read from them
    rows: int


def read_reference(
    path: Path,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    exclude: Sequence[str] = (),
) -> ReferenceData:
    if not path.is_file():
        raise InvalidArgumentError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        columns = _read_npz(path)
    elif suffix in (".parquet", ".csv"):
        columns = _read_table(path, suffix)
    else:
        raise InvalidArgumentError(
            f"{path}: unsupported data format '{path.suffix}'; give a .npz, .parquet or .csv file"
        )
    for name in exclude:
        if columns.pop(name, None) is None:
            raise InvalidArgumentError(f"{path}: --exclude names '{name}', which it does not hold")
    return _assign(path, columns, inputs, outputs)


def _read_npz(path: Path) -> dict[str, Array]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: np.asarray(archive[name]) for name in archive.files}
    except (OSError, ValueError, AttributeError) as exc:
        raise InvalidArgumentError(f"{path}: cannot read the archive ({exc})") from None


def _read_table(path: Path, suffix: str) -> dict[str, Array]:
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        raise InvalidArgumentError(
            f"{path}: reading {suffix} data needs pyarrow: pip install 'inferd[monitor]'"
        ) from None
    try:
        table = pq.read_table(path) if suffix == ".parquet" else pacsv.read_csv(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise InvalidArgumentError(f"{path}: cannot read the table ({exc})") from None
    columns: dict[str, Array] = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type):
            cells = column.to_pylist()
            try:
                columns[name] = np.asarray(cells, dtype=np.float64 if cells else None)
            except (ValueError, TypeError):
                raise InvalidArgumentError(
                    f"{path}: column '{name}' holds lists of different lengths or kinds"
                ) from None
        elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            columns[name] = np.array(
                [b"" if v is None else str(v).encode() for v in column.to_pylist()], dtype=object
            )
        else:
            columns[name] = np.asarray(column.to_numpy(zero_copy_only=False))
    return columns


def _assign(
    path: Path,
    columns: dict[str, Array],
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
) -> ReferenceData:
    arrays: dict[str, Array] = {}
    names: dict[str, tuple[str, ...]] = {}
    for spec in (*inputs, *outputs):
        if spec.name in columns:
            arrays[spec.name] = _fit(path, spec, columns.pop(spec.name))
    left = [spec for spec in inputs if spec.name not in arrays and not spec.optional]
    if columns and len(left) == 1:
        spec = left[0]
        stacked = np.column_stack([_numbers(path, n, a) for n, a in columns.items()])
        arrays[spec.name] = _fit(path, spec, stacked)
        names[spec.name] = tuple(columns)
        columns = {}
    if columns:
        raise InvalidArgumentError(
            f"{path}: {', '.join(repr(c) for c in columns)} is neither a tensor of the model "
            "nor needed for one; drop it with --exclude"
        )
    missing = [spec.name for spec in inputs if spec.name not in arrays and not spec.optional]
    if missing:
        raise InvalidArgumentError(
            f"{path}: no data for input {', '.join(repr(m) for m in missing)}"
        )
    counts = {name: len(array) for name, array in arrays.items()}
    if len(set(counts.values())) != 1:
        listed = ", ".join(f"{n}: {c}" for n, c in counts.items())
        raise InvalidArgumentError(f"{path}: the tensors hold different numbers of rows ({listed})")
    rows = next(iter(counts.values()))
    if rows == 0:
        raise InvalidArgumentError(f"{path}: holds no rows")
    return ReferenceData(arrays, names, rows)


def _numbers(path: Path, name: str, array: Array) -> Array:
    if array.ndim != 1 or array.dtype.kind not in "biuf":
        raise InvalidArgumentError(
            f"{path}: column '{name}' is not numeric; name it with --exclude or after a tensor"
        )
    return array


def _fit(path: Path, spec: TensorSpec, array: Array) -> Array:
    """``array`` as rows of ``spec``'s dims (a fixed row size may be given flat)."""
    if array.ndim == 1:
        array = array.reshape(len(array), 1)
    row = array.shape[1:]
    dims = spec.dims
    fits = len(dims) == len(row) and all(d in (-1, s) for d, s in zip(dims, row, strict=True))
    if not fits:
        if -1 in dims or prod(dims) != prod(row):
            raise InvalidArgumentError(
                f"{path}: '{spec.name}' has rows of shape {list(row)}; the model expects "
                f"{list(dims)}"
            )
        array = array.reshape(len(array), *dims)
    if spec.datatype.is_bytes:
        return array.astype(object)
    try:
        converted = array.astype(spec.datatype.dtype)
    except (ValueError, TypeError):
        raise InvalidArgumentError(
            f"{path}: '{spec.name}' cannot be read as {spec.datatype.name}"
        ) from None
    return converted
