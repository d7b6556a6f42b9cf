"""Shards: the ranges of rows a job writes one output file each for, and what names a job.

Pure functions (apart from reading the input's file sizes and times for its identity).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Shard", "input_stamp", "plan_shards"]


@dataclass(frozen=True, slots=True)
class Shard:
    index: int
    start: int  # first row
    stop: int  # one past the last row

    @property
    def rows(self) -> int:
        return self.stop - self.start

    @property
    def file_name(self) -> str:
        return f"part-{self.index:05d}.parquet"


def plan_shards(rows: int, shard_rows: int) -> list[Shard]:
    """Consecutive ranges of at most ``shard_rows`` rows covering ``0 .. rows - 1``."""
    if shard_rows < 1:
        raise ValueError("shard_rows must be at least 1")
    return [
        Shard(i, start, min(start + shard_rows, rows))
        for i, start in enumerate(range(0, rows, shard_rows))
    ]


def input_stamp(path: Path) -> dict[str, Any]:
    """What changes when the input changes: a file's size and time, a folder's files' names,
    sizes and times (as one digest)."""
    resolved = path.resolve()
    if resolved.is_dir():
        digest = hashlib.sha256()
        count = 0
        for child in sorted(resolved.iterdir()):
            if child.is_file():
                info = child.stat()
                digest.update(f"{child.name}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
                count += 1
        return {"path": str(resolved), "files": count, "digest": digest.hexdigest()}
    info = resolved.stat()
    return {"path": str(resolved), "bytes": info.st_size, "mtime_ns": info.st_mtime_ns}
