"""Sampled requests turned into what a log file takes, a batch at a time: pure functions.

A batch of records becomes one :class:`Chunk` per model (JSONL: its lines) or per model and
set of tensor columns (Parquet: an Arrow table). A chunk remembers how many records it holds
and the tensor bytes they were admitted with, so that the hand-off's bounds are released once
it is written, or once it has failed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

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


@dataclass(slots=True)
class Failure:
    """Records that could not be encoded (a bug, or a value no format can hold)."""

    model: str
    records: int
    held_bytes: int
    error: Exception


def _groups(
    items: Sequence[tuple[Captured, int]], key_of: Callable[[Captured], Hashable]
) -> dict[Hashable, tuple[list[Captured], int]]:
    """The records of each key, in order, and the bytes they were admitted with."""
    records: dict[Hashable, list[Captured]] = {}
    held: dict[Hashable, int] = {}
    for captured, nbytes in items:
        key = key_of(captured)
        records.setdefault(key, []).append(captured)
        held[key] = held.get(key, 0) + nbytes
    return {key: (found, held[key]) for key, found in records.items()}


def encode(fmt: str, items: Sequence[tuple[Captured, int]]) -> tuple[list[Chunk], list[Failure]]:
    """``items`` (records with their admitted bytes, in arrival order) as chunks of format
    ``fmt``, and the groups that failed."""
    chunks: list[Chunk] = []
    failures: list[Failure] = []
    if fmt == "parquet":
        from inferd.monitoring.payload_log.parquet import arrow_table, column_layout, schema_key

        for records, nbytes in _groups(items, column_layout).values():
            model, key = records[0].model, schema_key(records[0])
            try:
                table = arrow_table(key, records)
            except Exception as exc:
                failures.append(Failure(model, len(records), nbytes, exc))
                continue
            chunks.append(Chunk(model, len(records), nbytes, key=key, table=table))
        return chunks, failures
    for records, nbytes in _groups(items, lambda c: c.model).values():
        model = records[0].model
        try:
            lines = json_lines(records)
        except Exception as exc:
            failures.append(Failure(model, len(records), nbytes, exc))
            continue
        chunks.append(Chunk(model, len(records), nbytes, lines=lines))
    return chunks, failures
