"""Parquet chunks gathered into row groups before their table is built: a table is built once
a row group's worth of one layout has gathered or the oldest has waited long enough; it holds
the rows in order and equals the table built record by record; layouts never mix; a chunk of
records not alike first sends what of its model waits; every record is either handed over
or counted as failed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from inferd.monitoring.payload_log.columns import record_layout
from inferd.monitoring.payload_log.encode import Chunk, encode
from inferd.monitoring.payload_log.parquet import arrow_table, schema_key
from inferd.monitoring.payload_log.records import Captured
from inferd.monitoring.payload_log.row_groups import RowGroups, joined

Array = np.ndarray[Any, Any]


def record(i: int, model: str = "m", size: int = 3) -> Captured:
    return Captured(
        model,
        1,
        f"r{i}",
        1_700_000_000_000_000_000 + i * 1_000,
        {"x": np.arange(size, dtype=np.float32).reshape(1, size) + i},
        (),
        {"y": np.array([[i, -i]], dtype=np.int64)},
        {"p": i} if i % 2 else {},
    )


def chunk_of(records: list[Captured]) -> Chunk:
    """The chunk the event loop makes of ``records``: columns when they are alike."""
    (chunk,), failures = encode("parquet", [(r, 10) for r in records], build=False)
    assert failures == []
    return chunk


def test_a_table_is_built_once_a_row_group_has_gathered_and_equals_the_record_by_record_one() -> (
    None
):
    groups = RowGroups(rows=10)
    records = [record(i) for i in range(12)]
    first, second = chunk_of(records[:6]), chunk_of(records[6:])
    assert first.alike is not None
    assert first.table is None
    assert groups.add(first, now_ns=0) == ([], [])  # 6 of 10 rows: it waits
    (ready,), failed = groups.add(second, now_ns=1)
    assert failed == []
    assert not groups
    assert (ready.records, ready.held_bytes, ready.key) == (12, 120, schema_key(records[0]))
    assert ready.table.equals(arrow_table(schema_key(records[0]), records))


def test_the_oldest_waits_no_longer_than_its_limit() -> None:
    groups = RowGroups(rows=4096, max_wait_ns=1_000)
    groups.add(chunk_of([record(0), record(1)]), now_ns=100)
    assert groups.due(now_ns=1_099) == ([], [])
    (ready,), _ = groups.due(now_ns=1_100)
    assert ready.table.column("id").to_pylist() == ["r0", "r1"]
    assert not groups


def test_layouts_wait_apart_and_drain_hands_over_everything() -> None:
    groups = RowGroups(rows=4096)
    small = [record(i) for i in range(3)]
    large = [record(i, size=5) for i in range(3, 5)]
    other = [record(i, model="n") for i in range(5, 7)]
    assert record_layout(small[0]) != record_layout(large[0])
    for part in (small, large, other):
        groups.add(chunk_of(part), now_ns=0)
    ready, failed = groups.drain()
    assert failed == []
    assert not groups
    ids = sorted(c.table.column("id").to_pylist() for c in ready)
    assert ids == [["r0", "r1", "r2"], ["r3", "r4"], ["r5", "r6"]]


def test_a_chunk_of_records_not_alike_follows_what_of_its_model_waits() -> None:
    groups = RowGroups(rows=4096)
    groups.add(chunk_of([record(0), record(1)]), now_ns=0)
    groups.add(chunk_of([record(2, model="n")]), now_ns=0)
    mixed = [record(3), record(4, size=5)]  # two shapes: not alike, its table built at once
    (built,), _ = encode("parquet", [(r, 10) for r in mixed], build=False)
    assert built.alike is None
    assert built.table is not None
    ready, _ = groups.add(built, now_ns=0)
    assert [c.table.column("id").to_pylist() for c in ready] == [["r0", "r1"], ["r3", "r4"]]
    assert groups  # model n still waits


def test_joined_parts_hold_every_row_in_order() -> None:
    records = [record(i) for i in range(7)]
    parts = [chunk_of(records[:3]).alike, chunk_of(records[3:]).alike]
    whole = joined(parts)  # type: ignore[arg-type]
    assert whole.ids == [f"r{i}" for i in range(7)]
    assert whole.parameters == [r.parameters for r in records]
    assert np.array_equal(whole.inputs[0].values, np.concatenate([r.inputs["x"] for r in records]))


def test_a_table_that_cannot_be_built_is_a_counted_failure() -> None:
    groups = RowGroups(rows=2)
    chunk = chunk_of([record(0), record(1)])
    chunk.key = (("input", "x", "FP32"),)  # the output column missing: the build fails
    ready, (failure,) = groups.add(chunk, now_ns=0)
    assert ready == []
    assert not groups
    assert (failure.model, failure.records, failure.held_bytes) == ("m", 2, 20)
    assert isinstance(failure.error, (IndexError, pa.ArrowException, ValueError))
