"""The outputs of a shard as an Arrow table: the row index, then one column per output.

Pure functions. An output whose dims are all fixed is a (nested) fixed-size list column, one
with a variable dim a (nested) list column, so a job's schema follows from the model's config
alone and is the same in every shard and in every runner (single process or Ray). BYTES are
binary values; BF16 is widened to float32 (Arrow has no bfloat16).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from inferd.core.datatypes import DataType
from inferd.core.model_spec import ModelSpec
from inferd.errors import InternalError, InvalidArgumentError
from inferd.tools.batch.rows import shape_text

__all__ = ["ROW_COLUMN", "OutputPlan", "output_plans", "outputs_table", "warm_up_arrow"]

ROW_COLUMN = "row"


class OutputPlan:
    def __init__(self, name: str, datatype: DataType, dims: tuple[int, ...]) -> None:
        self.name = name
        self.datatype = datatype
        self.dims = dims


def output_plans(spec: ModelSpec, wanted: Sequence[str] | None) -> list[OutputPlan]:
    """The outputs to write, in the model's order (all of them unless ``wanted`` names some)."""
    by_name = {t.name: t for t in spec.outputs}
    if wanted:
        unknown = [n for n in wanted if n not in by_name]
        if unknown:
            raise InvalidArgumentError(
                f"model '{spec.name}' has no output {', '.join(unknown)} "
                f"(it has {', '.join(by_name)})"
            )
        if ROW_COLUMN in wanted:
            raise InvalidArgumentError(f"an output named '{ROW_COLUMN}' clashes with the row index")
    names = [t.name for t in spec.outputs if not wanted or t.name in wanted]
    if ROW_COLUMN in names:
        raise InvalidArgumentError(
            f"model '{spec.name}' has an output named '{ROW_COLUMN}', the row index's column; "
            "pick the other outputs with --outputs"
        )
    return [OutputPlan(n, by_name[n].datatype, tuple(by_name[n].dims)) for n in names]


def _value_type(dt: DataType) -> Any:
    import pyarrow as pa

    if dt.is_bytes:
        return pa.binary()
    if dt.name == "BF16":
        return pa.float32()
    return pa.from_numpy_dtype(dt.dtype)


def column_type(plan: OutputPlan) -> Any:
    import pyarrow as pa

    kind = _value_type(plan.datatype)
    fixed = -1 not in plan.dims
    for d in reversed(plan.dims):
        kind = pa.list_(kind, d) if fixed else pa.list_(kind)
    return kind


def _arrow_values(plan: OutputPlan, array: np.ndarray[Any, Any]) -> Any:
    import pyarrow as pa

    flat = array.reshape(-1)
    if plan.datatype.is_bytes:
        return pa.array([bytes(v) for v in flat], type=pa.binary())
    if plan.datatype.name == "BF16":
        flat = flat.astype(np.float32)
    return pa.array(flat, type=_value_type(plan.datatype))


def _piece(plan: OutputPlan, array: np.ndarray[Any, Any]) -> Any:
    """``array`` (rows first) as a column of ``plan``'s type."""
    import pyarrow as pa

    rows = array.shape[0]
    row_shape = tuple(int(d) for d in array.shape[1:])
    if len(row_shape) != len(plan.dims) or any(
        d != -1 and s != d for s, d in zip(row_shape, plan.dims, strict=True)
    ):
        raise InternalError(
            f"output '{plan.name}' came back as {shape_text(row_shape)} per row; the model's "
            f"config says {shape_text(plan.dims)}"
        )
    values = _arrow_values(plan, array)
    fixed = -1 not in plan.dims
    shape = (rows, *row_shape)
    for level in range(len(shape) - 1, 0, -1):  # the innermost dimension first
        size = shape[level]
        if fixed:
            values = pa.FixedSizeListArray.from_arrays(values, size)
        else:
            lists = int(np.prod(shape[:level], dtype=np.int64))
            offsets = pa.array(np.arange(lists + 1, dtype=np.int32) * size)
            values = pa.ListArray.from_arrays(offsets, values)
    return values


def outputs_table(
    plans: Sequence[OutputPlan],
    pieces: Sequence[tuple[np.ndarray[Any, Any], Mapping[str, np.ndarray[Any, Any]]]],
) -> Any:
    """One table from ``(row indices, outputs)`` pieces (each output's rows first), in order."""
    import pyarrow as pa

    ordered = sorted(pieces, key=lambda p: int(p[0][0]) if len(p[0]) else -1)
    rows = [p[0] for p in ordered if len(p[0])]
    columns: dict[str, Any] = {
        ROW_COLUMN: pa.array(np.concatenate(rows) if rows else np.empty(0, np.int64), pa.int64())
    }
    for plan in plans:
        kind = column_type(plan)
        chunks = [_piece(plan, p[1][plan.name]) for p in ordered if len(p[0])]
        columns[plan.name] = (pa.concat_arrays(chunks) if chunks else pa.array([], type=kind)).cast(
            kind
        )
    return pa.table(columns)


def warm_up_arrow() -> None:
    """Import Arrow and build one small table (its first use loads more modules), so that cost
    falls outside the pipeline and off the event loop."""
    import pyarrow as pa

    pa.table({ROW_COLUMN: pa.array(np.zeros(1, dtype=np.int64))})
