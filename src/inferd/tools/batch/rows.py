"""Rows read from a file checked against the model's inputs, before any inference.

Pure functions. A column is either dense (one array whose first axis is the rows) or a list of
per-row values (``None`` when the row has no value). A row is *bad* when one of its values has
the wrong shape, a type the input cannot take, a value out of the input's range, or a NaN or an
infinity where they are not allowed; bad rows are set aside with a reason and the others go on.
A column that cannot fit the input at all (text for a float input, every row of the wrong shape)
is the job's error, raised as :class:`InvalidArgumentError`, since every row would be bad.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.core.datatypes import DataType
from inferd.core.model_spec import ModelSpec
from inferd.errors import InvalidArgumentError

__all__ = ["CheckedRows", "Column", "InputPlan", "check_rows", "input_plans", "shape_text"]

Column = np.ndarray[Any, Any] | list[Any]
RowValues = np.ndarray[Any, Any] | list[np.ndarray[Any, Any]]


@dataclass(frozen=True, slots=True)
class InputPlan:
    """What one model input takes, per row."""

    name: str
    datatype: DataType
    dims: tuple[int, ...]  # per row (without the batch dimension); -1 = any size
    optional: bool = False


def input_plans(spec: ModelSpec) -> tuple[InputPlan, ...]:
    return tuple(InputPlan(t.name, t.datatype, tuple(t.dims), t.optional) for t in spec.inputs)


@dataclass(slots=True)
class CheckedRows:
    """The good rows of a block (``rows``: their indices, ascending) and the bad ones."""

    rows: np.ndarray[Any, Any]
    # per input: the good rows stacked (one array) when they share a shape, else one array each
    inputs: dict[str, RowValues]
    bad: list[tuple[int, str]] = field(default_factory=list)


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _fits(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    return len(shape) == len(dims) and all(
        d == -1 or s == d for s, d in zip(shape, dims, strict=True)
    )


def _fit_shape(shape: tuple[int, ...], dims: tuple[int, ...]) -> tuple[int, ...] | None:
    """The per-row shape a value of ``shape`` is read as, or None when it cannot fit.

    A value of the input's shape is taken as it is; when every dim is fixed, a flat value (or
    a scalar for one element) with as many elements is reshaped to the dims.
    """
    if _fits(shape, dims):
        return shape
    elements = int(np.prod(shape, dtype=np.int64))
    if -1 not in dims and len(shape) <= 1 and elements == int(np.prod(dims, dtype=np.int64)):
        return dims
    return None


class _TypeMismatch(Exception):
    """The values' type cannot become the input's datatype (the reason is the message)."""


def _convert(values: np.ndarray[Any, Any], dt: DataType) -> np.ndarray[Any, Any]:
    """``values`` as the input's dtype; raise :class:`_TypeMismatch` when its kind cannot be."""
    kind = values.dtype.kind
    if dt.is_bytes:
        if kind in "US":
            return np.array([_as_bytes(v) for v in values.ravel()], dtype=object).reshape(
                values.shape
            )
        if kind == "O":
            if not all(isinstance(v, (str, bytes)) for v in values.ravel()):
                raise _TypeMismatch("values other than text where the model takes BYTES")
            return np.array([_as_bytes(v) for v in values.ravel()], dtype=object).reshape(
                values.shape
            )
        raise _TypeMismatch(f"{values.dtype} values where the model takes BYTES")
    if kind in "USO":
        raise _TypeMismatch(f"text where the model takes {dt.name}")
    target = dt.dtype
    if target.kind == "b":
        if kind != "b":
            raise _TypeMismatch(f"{values.dtype} values where the model takes BOOL")
        return values
    if kind not in "biuf" and values.dtype.name != "bfloat16":
        raise _TypeMismatch(f"{values.dtype} values where the model takes {dt.name}")
    return values


def _as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _row_problems(
    values: np.ndarray[Any, Any], dt: DataType, allow_nan: bool
) -> tuple[np.ndarray[Any, Any], list[str | None]]:
    """Cast a (converted) dense block of rows to the input's dtype and name each bad row.

    Returns the cast array and, per row, ``None`` or the reason it is bad: a NaN or an
    infinity (floats, unless allowed), a non-integer or out-of-range value (integers).
    """
    n = values.shape[0]
    reasons: list[str | None] = [None] * n
    target = dt.dtype
    if dt.is_bytes or target.kind == "b":
        return values, reasons
    flat = values.reshape(n, -1)
    if target.kind in "iu":
        if flat.dtype.kind == "f":
            finite = np.isfinite(flat)
            whole = finite & (np.floor(np.where(finite, flat, 0)) == np.where(finite, flat, 0))
            for i in np.flatnonzero(~whole.all(axis=1)):
                reasons[i] = f"a value that is not a whole number where the model takes {dt.name}"
        info = np.iinfo(target)
        with np.errstate(invalid="ignore"):
            out = (flat < info.min) | (flat > info.max)
        for i in np.flatnonzero(out.any(axis=1)):
            reasons[i] = reasons[i] or f"a value outside the range of {dt.name}"
        cast = np.where(np.isfinite(flat), flat, 0) if flat.dtype.kind == "f" else flat
        with np.errstate(invalid="ignore", over="ignore"):
            return cast.astype(target).reshape(values.shape), reasons
    with np.errstate(over="ignore", invalid="ignore"):
        cast = flat.astype(target)
    if not allow_nan:
        as_float = cast.astype(np.float32) if target.name == "bfloat16" else cast
        bad = ~np.isfinite(as_float).all(axis=1)
        if flat.dtype.kind == "f":  # a finite value too large for the target became infinite
            bad |= ~np.isfinite(flat).all(axis=1)
        for i in np.flatnonzero(bad):
            reasons[i] = "a NaN or infinite value (pass --allow-nan to send them)"
    return cast.reshape(values.shape), reasons


def _check_dense(
    plan: InputPlan, column: np.ndarray[Any, Any], allow_nan: bool
) -> tuple[np.ndarray[Any, Any], list[str | None]]:
    row_shape = tuple(int(d) for d in column.shape[1:])
    fitted = _fit_shape(row_shape, plan.dims)
    if fitted is None:
        raise InvalidArgumentError(
            f"column '{plan.name}' holds rows of shape {shape_text(row_shape)}; the model's "
            f"input '{plan.name}' takes {shape_text(plan.dims)} per row"
        )
    try:
        converted = _convert(column, plan.datatype)
    except _TypeMismatch as exc:
        raise InvalidArgumentError(f"column '{plan.name}': {exc}") from None
    cast, reasons = _row_problems(converted, plan.datatype, allow_nan)
    return cast.reshape((column.shape[0], *fitted)), reasons


def _check_value(plan: InputPlan, value: Any, allow_nan: bool) -> np.ndarray[Any, Any] | str:
    """One row's value as the input's array, or the reason the row is bad."""
    if value is None:
        return "no value"
    array = np.asarray(value)
    if array.dtype.kind == "O" and not plan.datatype.is_bytes:
        try:
            array = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            return f"values the model cannot read as {plan.datatype.name}"
    fitted = _fit_shape(tuple(int(d) for d in array.shape), plan.dims)
    if fitted is None:
        return f"shape {shape_text(array.shape)} where the model takes {shape_text(plan.dims)}"
    try:
        converted = _convert(array.reshape((1, *fitted)), plan.datatype)
    except _TypeMismatch as exc:
        return str(exc)
    cast, reasons = _row_problems(converted, plan.datatype, allow_nan)
    return reasons[0] if reasons[0] is not None else cast[0]


def check_rows(
    first_row: int,
    count: int,
    columns: Mapping[str, Column],
    plans: Sequence[InputPlan],
    *,
    allow_nan: bool = False,
    row_errors: Mapping[int, str] | None = None,
) -> CheckedRows:
    """Check rows ``first_row .. first_row + count - 1`` of ``columns`` against ``plans``.

    ``row_errors`` names rows the reader already found bad (by offset in the block).
    """
    reasons: list[str | None] = [None] * count
    for offset, reason in (row_errors or {}).items():
        reasons[offset] = reason
    values: dict[str, Column] = {}
    for plan in plans:
        column = columns.get(plan.name)
        if column is None:
            if plan.optional:
                continue
            raise InvalidArgumentError(f"the input data has no column for input '{plan.name}'")
        if len(column) != count:
            raise InvalidArgumentError(
                f"column '{plan.name}' has {len(column)} rows in a block of {count}"
            )
        if isinstance(column, np.ndarray) and column.dtype.kind != "O":
            dense, dense_reasons = _check_dense(plan, column, allow_nan)
            values[plan.name] = dense
            for i, why in enumerate(dense_reasons):
                if why is not None and reasons[i] is None:
                    reasons[i] = f"input '{plan.name}': {why}"
            continue
        rows: list[Any] = []
        for i, value in enumerate(column):
            checked = _check_value(plan, value, allow_nan)
            if isinstance(checked, str):
                if reasons[i] is None:
                    reasons[i] = f"input '{plan.name}': {checked}"
                rows.append(None)
            else:
                rows.append(checked)
        values[plan.name] = rows
    good = [i for i in range(count) if reasons[i] is None]
    inputs: dict[str, RowValues] = {}
    for name, column in values.items():
        if isinstance(column, np.ndarray):
            inputs[name] = column[good] if len(good) != count else column
        else:
            kept = [column[i] for i in good]
            shapes = {a.shape for a in kept}
            inputs[name] = np.stack(kept) if len(shapes) == 1 else kept
    return CheckedRows(
        rows=np.asarray(good, dtype=np.int64) + first_row,
        inputs=inputs,
        bad=[(first_row + i, why) for i, why in enumerate(reasons) if why is not None],
    )
