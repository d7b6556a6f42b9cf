"""Parquet chunks gathered into row groups on the event loop before their Arrow table is built.

Every pyarrow call lets go of the interpreter lock, and an event loop that lets go of it waits
for each other thread that wants it before it runs again (``bench/payload_encode.py``'s
"contended" column). Building a table costs a few dozen such calls whatever its rows, so
chunks of records all alike wait here, as columns, until a row group's worth has gathered
(:data:`~inferd.monitoring.payload_log.parquet.ROW_GROUP_ROWS` records) or the oldest has
waited :data:`MAX_WAIT_NS`; their table is then built once, on the loop (building it on the
writer thread instead makes that thread wait for the busy loop at every call, and costs more:
docs/observability.md). Chunks of one layout leave in the order they came, and a chunk that
comes with its table already built (records not alike) first sends what of its model waits.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.monitoring.payload_log.columns import Column, Uniform, record_layout
from inferd.monitoring.payload_log.encode import Chunk, Failure
from inferd.monitoring.payload_log.parquet import uniform_table

__all__ = ["MAX_WAIT_NS", "RowGroups", "joined"]

#: the longest a record waits here (its file gets it no sooner than a row group's worth anyway)
MAX_WAIT_NS = 1_000_000_000


def joined(parts: list[Uniform]) -> Uniform:
    """Records all alike, of one layout, as one (their rows in order)."""
    if len(parts) == 1:
        return parts[0]
    head = parts[0]

    def stacked(columns: list[Column], side: str) -> list[Column]:
        return [
            Column(c.name, c.shape, np.concatenate([getattr(p, side)[i].values for p in parts]))
            for i, c in enumerate(columns)
        ]

    def chained(name: str) -> list[Any]:
        return list(itertools.chain.from_iterable(getattr(p, name) for p in parts))

    return Uniform(
        head.first,
        stacked(head.inputs, "inputs"),
        stacked(head.outputs, "outputs"),
        chained("ids"),
        chained("times_ns"),
        chained("parameters"),
    )


@dataclass(slots=True)
class _Waiting:
    """Chunks of one layout (their columns), waiting for their table."""

    model: str
    key: Any  # the Parquet columns (a ``parquet.Key``)
    since_ns: int  # when its first chunk came
    parts: list[Uniform] = field(default_factory=list)
    records: int = 0
    held_bytes: int = 0


class RowGroups:
    """Chunks for Parquet waiting to be built. ``add`` and ``due`` return the chunks ready to
    hand to the writer (their tables built) and the ones whose table could not be built."""

    def __init__(self, rows: int, max_wait_ns: int = MAX_WAIT_NS) -> None:
        self._rows = rows
        self._max_wait_ns = max_wait_ns
        self._waiting: dict[Hashable, _Waiting] = {}  # by layout (which decides the key)

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def add(self, chunk: Chunk, now_ns: int) -> tuple[list[Chunk], list[Failure]]:
        """Take ``chunk`` (columns when ``chunk.alike``, else its table built)."""
        alike = chunk.alike
        if alike is None:
            ready, failed = self._send(lambda w: w.model == chunk.model)
            return [*ready, chunk], failed
        layout = record_layout(alike.first)
        waiting = self._waiting.get(layout)
        if waiting is None:
            waiting = self._waiting[layout] = _Waiting(chunk.model, chunk.key, now_ns)
        waiting.parts.append(alike)
        waiting.records += chunk.records
        waiting.held_bytes += chunk.held_bytes
        if waiting.records >= self._rows:
            return self._send(lambda w: w is waiting)
        return [], []

    def due(self, now_ns: int) -> tuple[list[Chunk], list[Failure]]:
        """The groups that have waited long enough."""
        return self._send(lambda w: now_ns - w.since_ns >= self._max_wait_ns)

    def drain(self) -> tuple[list[Chunk], list[Failure]]:
        """Everything waiting."""
        return self._send(lambda w: True)

    def _send(self, chosen: Callable[[_Waiting], bool]) -> tuple[list[Chunk], list[Failure]]:
        ready: list[Chunk] = []
        failed: list[Failure] = []
        for layout, waiting in list(self._waiting.items()):
            if not chosen(waiting):
                continue
            del self._waiting[layout]
            model, records, held = waiting.model, waiting.records, waiting.held_bytes
            try:
                table = uniform_table(waiting.key, joined(waiting.parts))
            except Exception as exc:  # a value no Arrow column holds, or a bug
                failed.append(Failure(model, records, held, exc))
                continue
            ready.append(Chunk(model, records, held, key=waiting.key, table=table))
        return ready, failed
