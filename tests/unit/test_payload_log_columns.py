"""Batches whose records are all alike, encoded a column at a time: the check finds exactly
the batches that are alike, the columns hold each record's values, the timestamps read as the
record-by-record text, and the Arrow table is the one built record by record."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.monitoring.payload_log.columns import timestamp_texts, uniform
from inferd.monitoring.payload_log.parquet import arrow_table, schema_key, uniform_table
from inferd.monitoring.payload_log.records import Captured, timestamp_text

Array = np.ndarray[Any, Any]


def record(i: int, **changes: Any) -> Captured:
    base = Captured(
        "m",
        1,
        f"r{i}",
        1_700_000_000_000_000_000 + i * 333_333_333,
        {"a": np.arange(6, dtype=np.float32).reshape(2, 3) + i, "b": np.array([i], np.int64)},
        (),
        {"y": np.full(4, i, dtype=np.int32)},
        {},
    )
    return base._replace(**changes)


def test_alike_records_become_one_array_per_tensor() -> None:
    records = [record(i) for i in range(5)]
    alike = uniform(records)
    assert alike is not None
    assert [c.name for c in alike.inputs] == ["a", "b"]
    assert [c.name for c in alike.outputs] == ["y"]
    a = alike.inputs[0]
    assert a.shape == (2, 3)
    assert a.values.shape == (5, 6)
    assert a.values.dtype == np.float32
    for i in range(5):
        assert np.array_equal(a.values[i], records[i].inputs["a"].reshape(-1))
        assert np.array_equal(alike.outputs[0].values[i], records[i].outputs["y"])
    assert alike.ids == [f"r{i}" for i in range(5)]


def test_an_array_that_is_not_contiguous_is_copied_into_its_column() -> None:
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]  # (3, 2), not contiguous
    records = [record(0), record(1, inputs={"a": strided, "b": np.array([1], np.int64)})]
    records[0] = records[0]._replace(inputs={"a": strided * 2, "b": np.array([0], np.int64)})
    alike = uniform(records)
    assert alike is not None
    assert alike.inputs[0].values.tolist() == [
        (strided * 2).reshape(-1).tolist(),
        strided.reshape(-1).tolist(),
    ]


@pytest.mark.parametrize(
    "change",
    [
        {"model": "other"},
        {"version": 2},
        {"redacted": ("secret",)},
        {"inputs": {"b": np.array([1], np.int64), "a": np.zeros((2, 3), np.float32)}},  # order
        {"inputs": {"a": np.zeros((2, 3), np.float64), "b": np.array([1], np.int64)}},  # dtype
        {"inputs": {"a": np.zeros((3, 2), np.float32), "b": np.array([1], np.int64)}},  # shape
        {"inputs": {"a": np.zeros((2, 3), np.float32)}},  # a tensor missing
        {"outputs": {"y": np.zeros(4, np.int32), "z": np.zeros(1, np.int32)}},  # one more
        {"outputs": {"y": np.zeros(4, np.dtype(">i4"))}},  # byte order
    ],
)
def test_any_difference_between_records_leaves_the_batch_to_the_layout_sort(
    change: dict[str, Any],
) -> None:
    records = [record(0), record(1), record(2, **change)]
    assert uniform(records) is None
    assert uniform(records[:2]) is not None


def test_bytes_tensors_are_never_joined() -> None:
    texts = np.array([b"x", b"yz"], dtype=object)
    records = [record(i, outputs={"y": texts}) for i in range(3)]
    assert uniform(records) is None  # an object array's buffer holds pointers


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.integers(0, 4_102_444_800_000_000_000),  # 1970 to 2100
        min_size=1,
        max_size=40,
    ),
    st.integers(0, 3),
)
def test_timestamps_read_as_each_records_own(times: list[int], spread: int) -> None:
    # records of one batch usually share a second or two; some batches span many
    times = [times[0] + (t % 10**9) * spread for t in times] if spread < 3 else times
    assert timestamp_texts(times) == [timestamp_text(t).encode() for t in times]


def test_timestamps_before_1970_are_formatted_one_by_one() -> None:
    times = [-1_500_000_000, 0, 1_234]
    assert timestamp_texts(times) == [timestamp_text(t).encode() for t in times]
    assert timestamp_texts(times)[0] == b"1969-12-31T23:59:58.500000Z"


DTYPES = ["?", "i1", "i4", "i8", "u2", "u8", "f2", "f4", "f8"]


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(DTYPES),
    st.lists(st.integers(0, 3), max_size=3),
    st.integers(1, 6),
    st.sampled_from([(), ("secret",), ("s1", "s2")]),
    st.booleans(),
)
def test_the_column_wise_table_is_the_record_by_record_table(
    dtype: str, shape: list[int], count: int, redacted: tuple[str, ...], parameters: bool
) -> None:
    size = int(np.prod(shape)) if shape else 1
    records = [
        Captured(
            "m",
            3,
            f"id{i}",
            1_700_000_000_000_000_000 + i * 1_000_001,
            {"x": (np.arange(size) + i).astype(dtype).reshape(shape)},
            redacted,
            {"y": np.full(shape, i, dtype=dtype), "n": np.array([i], np.int64)},
            {"k": i, "t": '"'} if parameters else {},
        )
        for i in range(count)
    ]
    alike = uniform(records)
    assert alike is not None
    key = schema_key(records[0])
    column_wise = uniform_table(key, alike)
    assert isinstance(column_wise, pa.Table)
    assert column_wise.equals(arrow_table(key, records), check_metadata=True)
