"""Sampled requests turned into what a log file takes, a batch at a time: pure functions.

A batch of records becomes one :class:`Chunk` per model (JSONL: its lines) or per model and
set of tensor columns (Parquet: an Arrow table). A chunk remembers how many records it holds
and the tensor bytes they were admitted with, so that the hand-off's bounds are released once
it is written, or once it has failed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from inferd.monitoring.payload_log.columns import Uniform, uniform
from inferd.monitoring.payload_log.json_batch import json_lines
from inferd.monitoring.payload_log.records import Captured

__all__ = ["Chunk", "Failure", "encode"]


@dataclass(slots=True)
class Chunk:
    model: str
    records: int  # how many records it holds
    held_bytes: int  # the tensor bytes they were admitted with
    lines: list[bytes] | None = None  # JSONL: one line per record, newline included
    key: Any = None  # Parquet: the tensor columns (a ``parquet.Key``)
    table: Any = None  # Parquet: one row per record
    alike: Uniform | None = None  # Parquet, records all alike: their columns, until the
    # table is built for a row group's worth of them (``row_groups``)


@dataclass(slots=True)
class Failure:
    """Records that could not be encoded (a bug, or a value no format can hold)."""

    model: str
    records: int
    held_bytes: int
    error: Exception


_record = itemgetter(0)  # of an item: the record
_held = itemgetter(1)  # of an item: the bytes it was admitted with
_model_of = itemgetter(0)  # of a record: its model


def _groups(
    items: Sequence[tuple[Captured, int]], key_of: Callable[[Captured], Hashable]
) -> dict[Hashable, tuple[list[Captured], int]]:
    """The records of each key, in order, and the bytes they were admitted with."""
    if items:
        every: list[Captured] = list(map(_record, items))
        keys = list(map(key_of, every))
        if keys.count(keys[0]) == len(keys):  # the usual case: one key (counted in C)
            return {keys[0]: (every, sum(map(_held, items)))}
    records: dict[Hashable, list[Captured]] = {}
    held: dict[Hashable, int] = {}
    for captured, nbytes in items:
        key = key_of(captured)
        records.setdefault(key, []).append(captured)
        held[key] = held.get(key, 0) + nbytes
    return {key: (found, held[key]) for key, found in records.items()}


def _parquet(
    items: Sequence[tuple[Captured, int]], build: bool
) -> tuple[list[Chunk], list[Failure]]:
    """Arrow tables: one when the records are all alike (the usual case, built a column at a
    time; left as columns in ``Chunk.alike`` unless ``build``), else one per model and set
    of tensor columns."""
    from inferd.monitoring.payload_log.parquet import (
        arrow_table,
        column_layout,
        schema_key,
        uniform_table,
    )

    records = list(map(_record, items))
    alike = uniform(records)
    groups: list[tuple[list[Captured], int, Uniform | None]]
    if alike is not None:
        groups = [(records, sum(map(_held, items)), alike)]
    else:
        groups = [(found, held, None) for found, held in _groups(items, column_layout).values()]
    chunks: list[Chunk] = []
    failures: list[Failure] = []
    for found, held, same in groups:
        model = found[0].model
        try:
            key = schema_key(found[0])
            if same is not None and not build:
                chunks.append(Chunk(model, len(found), held, key=key, alike=same))
                continue
            table = uniform_table(key, same) if same is not None else arrow_table(key, found)
        except Exception as exc:
            failures.append(Failure(model, len(found), held, exc))
            continue
        chunks.append(Chunk(model, len(found), held, key=key, table=table))
    return chunks, failures


def encode(
    fmt: str, items: Sequence[tuple[Captured, int]], *, build: bool = True
) -> tuple[list[Chunk], list[Failure]]:
    """``items`` (records with their admitted bytes, in arrival order) as chunks of format
    ``fmt``, and the groups that failed. Parquet chunks of records all alike are left as
    columns, their table not built, unless ``build``."""
    if fmt == "parquet":
        return _parquet(items, build) if items else ([], [])
    chunks: list[Chunk] = []
    failures: list[Failure] = []
    for records, nbytes in _groups(items, _model_of).values():
        model = records[0].model
        try:
            lines = json_lines(records)
        except Exception as exc:
            failures.append(Failure(model, len(records), nbytes, exc))
            continue
        chunks.append(Chunk(model, len(records), nbytes, lines=lines))
    return chunks, failures
