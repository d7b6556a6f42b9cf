"""inferd batch's pure parts: row checks, request slices, shards, output tables, bisection."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.core.datatypes import from_name
from inferd.errors import InternalError, InvalidArgumentError, UnavailableError
from inferd.tools.batch.arrow_columns import arrow_to_column
from inferd.tools.batch.batches import batch_inputs, slices
from inferd.tools.batch.isolate import infer_isolating
from inferd.tools.batch.output import OutputPlan, outputs_table
from inferd.tools.batch.rows import CheckedRows, InputPlan, check_rows
from inferd.tools.batch.shards import plan_shards

FP32_4 = InputPlan("x", from_name("FP32"), (4,))


def test_dense_rows_pass_and_nan_rows_are_bad() -> None:
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    x[1, 2] = np.nan
    checked = check_rows(10, 3, {"x": x}, [FP32_4])
    assert checked.rows.tolist() == [10, 12]
    assert [row for row, _ in checked.bad] == [11]
    assert "NaN" in checked.bad[0][1]
    dense = checked.inputs["x"]
    assert isinstance(dense, np.ndarray)
    assert dense.dtype == np.float32
    assert dense.shape == (2, 4)
    assert check_rows(0, 3, {"x": x}, [FP32_4], allow_nan=True).bad == []


def test_ragged_rows_name_their_shape() -> None:
    column = [np.ones(4), np.ones(3), None, [1, 2, "a", 4]]
    checked = check_rows(0, 4, {"x": column}, [FP32_4])
    assert checked.rows.tolist() == [0]
    reasons = dict(checked.bad)
    assert "shape [3]" in reasons[1]
    assert "no value" in reasons[2]
    assert "FP32" in reasons[3]


def test_integer_inputs_refuse_fractions_and_overflow() -> None:
    plan = InputPlan("i", from_name("INT8"), (2,))
    values = np.array([[1.0, 2.0], [1.5, 0.0], [300.0, 1.0], [-3.0, 4.0]])
    checked = check_rows(0, 4, {"i": values}, [plan])
    assert checked.rows.tolist() == [0, 3]
    assert sorted(row for row, _ in checked.bad) == [1, 2]
    assert checked.inputs["i"].dtype == np.int8  # type: ignore[union-attr]


def test_a_column_that_cannot_fit_is_the_jobs_error() -> None:
    with pytest.raises(InvalidArgumentError, match="shape \\[5\\]"):
        check_rows(0, 2, {"x": np.zeros((2, 5))}, [FP32_4])
    with pytest.raises(InvalidArgumentError, match="text"):
        check_rows(0, 1, {"x": np.array([["a"] * 4])}, [FP32_4])
    with pytest.raises(InvalidArgumentError, match="no column for input 'x'"):
        check_rows(0, 1, {}, [FP32_4])


def test_flat_values_fill_fixed_dims_and_text_becomes_bytes() -> None:
    image = InputPlan("img", from_name("FP32"), (1, 2, 2))
    checked = check_rows(0, 1, {"img": np.arange(4.0).reshape(1, 4)}, [image])
    assert checked.inputs["img"].shape == (1, 1, 2, 2)  # type: ignore[union-attr]
    text = InputPlan("s", from_name("BYTES"), (1,))
    checked = check_rows(0, 2, {"s": ["a", "bc"]}, [text])
    assert checked.inputs["s"].tolist() == [[b"a"], [b"bc"]]  # type: ignore[union-attr]


def test_arrow_columns_become_dense_or_per_row() -> None:
    fixed = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(6, dtype=np.float32)), 3)
    dense = arrow_to_column(fixed)
    assert isinstance(dense, np.ndarray)
    assert dense.shape == (2, 3)
    nested = pa.FixedSizeListArray.from_arrays(fixed, 2)
    assert arrow_to_column(nested).shape == (1, 2, 3)  # type: ignore[union-attr]
    ragged = arrow_to_column(pa.array([[1, 2], None, [3]]))
    assert isinstance(ragged, list)
    assert ragged[1] is None
    assert ragged[2].tolist() == [3]


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.sampled_from([2, 3]), min_size=0, max_size=30),
    batch=st.integers(1, 7),
)
def test_slices_cover_every_row_once_within_the_batch_and_one_shape(
    lengths: list[int], batch: int
) -> None:
    plan = InputPlan("v", from_name("INT32"), (-1,))
    column = [np.arange(n) for n in lengths]
    checked = check_rows(0, len(column), {"v": column}, [plan])
    cuts = slices(checked, batch)
    covered = [i for start, stop in cuts for i in range(start, stop)]
    assert covered == list(range(len(lengths)))
    for start, stop in cuts:
        assert 0 < stop - start <= batch
        assert batch_inputs(checked, start, stop, batching=True)["v"].shape[0] == stop - start


@given(rows=st.integers(0, 500), size=st.integers(1, 64))
def test_shards_cover_the_rows_in_order(rows: int, size: int) -> None:
    shards = plan_shards(rows, size)
    assert [s.index for s in shards] == list(range(len(shards)))
    assert sum(s.rows for s in shards) == rows
    assert all(a.stop == b.start for a, b in itertools.pairwise(shards))
    assert all(0 < s.rows <= size for s in shards)


def test_output_tables_follow_the_config_dims() -> None:
    fixed = OutputPlan("y", from_name("FP32"), (2, 2))
    ragged = OutputPlan("z", from_name("INT64"), (-1,))
    pieces = [
        (np.array([5, 6]), {"y": np.ones((2, 2, 2), np.float32), "z": np.ones((2, 3), np.int64)}),
        (np.array([1]), {"y": np.zeros((1, 2, 2), np.float32), "z": np.zeros((1, 1), np.int64)}),
    ]
    table = outputs_table([fixed, ragged], pieces)
    assert table.column("row").to_pylist() == [1, 5, 6]
    assert table.schema.field("y").type == pa.list_(pa.list_(pa.float32(), 2), 2)
    assert table.schema.field("z").type == pa.list_(pa.int64())
    assert table.column("z").to_pylist() == [[0], [1, 1, 1], [1, 1, 1]]
    assert table.column("y").to_pylist()[0] == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(InternalError, match="per row"):
        outputs_table([fixed], [(np.array([0]), {"y": np.ones((1, 3), np.float32)})])


def _checked(values: list[int]) -> CheckedRows:
    plan = InputPlan("x", from_name("INT32"), (1,))
    return check_rows(100, len(values), {"x": np.array(values).reshape(-1, 1)}, [plan])


def _model(calls: list[int]) -> Any:
    """Doubles its input; a batch holding a negative value fails as a bad request would."""

    async def infer(inputs: dict[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        x = inputs["x"]
        calls.append(x.shape[0])
        if (x < 0).any():
            raise InvalidArgumentError("negative value")
        return {"y": x * 2}

    return infer


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.integers(-3, 20), min_size=1, max_size=16))
def test_bisection_finds_exactly_the_bad_rows(values: list[int]) -> None:
    calls: list[int] = []
    checked = _checked(values)
    answered, bad = asyncio.run(
        infer_isolating(_model(calls), checked, 0, len(values), batching=True)
    )
    assert sorted(r for r, _ in bad) == [100 + i for i, v in enumerate(values) if v < 0]
    good = {
        int(r): int(y) for rows, out in answered for r, y in zip(rows, out["y"][:, 0], strict=True)
    }
    assert good == {100 + i: 2 * v for i, v in enumerate(values) if v >= 0}
    if all(v >= 0 for v in values):
        assert calls == [len(values)]


def test_errors_no_row_is_to_blame_for_end_the_job() -> None:
    async def down(inputs: dict[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        raise UnavailableError("model unloaded")

    with pytest.raises(UnavailableError):
        asyncio.run(infer_isolating(down, _checked([1, 2]), 0, 2, batching=True))
