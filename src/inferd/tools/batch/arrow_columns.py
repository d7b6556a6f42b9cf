"""Arrow columns as the rows' values (:data:`~inferd.tools.batch.rows.Column`).

Pure functions shared by the file readers and the Ray Data path (whose batches are Arrow
tables). A column of fixed-size lists without nulls becomes one dense array (nested fixed-size
lists add dimensions); plain numbers without nulls become a dense 1-D array; anything else
(variable-length lists, text, nulls) becomes one value per row, ``None`` for a null.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.tools.batch.rows import Column

__all__ = ["arrow_to_column", "table_columns"]


def _fixed_dense(array: Any) -> np.ndarray[Any, Any] | None:
    """A fixed-size-list array (nested or not) without nulls as ``[rows, d1, d2, ...]``."""
    import pyarrow as pa

    dims: list[int] = []
    current = array
    rows = len(array)
    while pa.types.is_fixed_size_list(current.type):
        if current.null_count:
            return None
        dims.append(current.type.list_size)
        current = current.flatten()
    if current.null_count or not (
        pa.types.is_integer(current.type)
        or pa.types.is_floating(current.type)
        or pa.types.is_boolean(current.type)
    ):
        return None
    values: np.ndarray[Any, Any] = current.to_numpy(zero_copy_only=False)
    return values.reshape((rows, *dims))


def _list_rows(array: Any) -> list[Any] | None:
    """A list array of plain numbers, row by row (``None`` for a null row), or None when its
    values are not plain numbers without nulls."""
    import pyarrow as pa

    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        return None
    inner = array.values
    if inner.null_count or not (
        pa.types.is_integer(inner.type)
        or pa.types.is_floating(inner.type)
        or pa.types.is_boolean(inner.type)
    ):
        return None
    offsets = array.offsets.to_numpy()
    values = inner.to_numpy(zero_copy_only=False)
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    return [values[offsets[i] : offsets[i + 1]] if valid[i] else None for i in range(len(array))]


def arrow_to_column(column: Any) -> Column:
    """One Arrow array or chunked array as a column of rows."""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_fixed_size_list(array.type):
        dense = _fixed_dense(array)
        if dense is not None:
            return dense
    elif (
        pa.types.is_integer(array.type)
        or pa.types.is_floating(array.type)
        or pa.types.is_boolean(array.type)
    ) and not array.null_count:
        values: np.ndarray[Any, Any] = array.to_numpy(zero_copy_only=False)
        return values
    rows = _list_rows(array)
    if rows is not None:
        return rows
    return [None if v is None else _nested(v) for v in array.to_pylist()]


def _nested(value: Any) -> Any:
    """A Python value from Arrow (nested lists, text, bytes) as the row's value."""
    if isinstance(value, list):
        if any(v is None for v in value):
            return np.array(value, dtype=object)  # the row check names the missing element
        return np.asarray(value)
    return value


def table_columns(table: Any, names: list[str]) -> dict[str, Column]:
    """The columns of ``table`` named ``names`` (those it has)."""
    have = set(table.column_names)
    return {name: arrow_to_column(table.column(name)) for name in names if name in have}
