"""The output folder: shard files, the manifest that makes a job resumable, the bad rows.

Layout (the names starting with ``_`` keep the folder readable as one Parquet dataset, since
Arrow, pandas and Spark skip such files)::

    OUT/part-00000.parquet ...   one file per finished shard: the row index and the outputs
    OUT/_manifest.json           the job's identity and its finished shards
    OUT/_bad_rows.jsonl          one line per bad row: {"row", "shard", "reason"}

A shard is written to a hidden temporary file, renamed into place, its bad rows appended, and
only then recorded in the manifest (itself replaced atomically). After a kill, a rerun skips the
recorded shards and redoes any other: its file and bad-row lines are dropped first. A folder
holding another job's output, or anything else, is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from inferd.errors import InvalidArgumentError
from inferd.tools.batch.shards import Shard

__all__ = ["BAD_ROWS", "MANIFEST", "OutputDir"]

MANIFEST = "_manifest.json"
BAD_ROWS = "_bad_rows.jsonl"
FORMAT_VERSION = 1


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


class OutputDir:
    """An output folder opened for one job (its identity is a JSON-able dict)."""

    def __init__(self, path: Path, identity: dict[str, Any], shard_count: int) -> None:
        self.path = path
        self._identity = identity
        self._shard_count = shard_count
        self.finished: dict[int, dict[str, Any]] = {}

    @classmethod
    def open(cls, path: Path, identity: dict[str, Any], shard_count: int) -> OutputDir:
        """Create the folder or resume the job it holds; refuse anything else."""
        out = cls(path, identity, shard_count)
        if path.exists() and not path.is_dir():
            raise InvalidArgumentError(f"--output {path} is a file; give a folder")
        manifest = path / MANIFEST
        if manifest.is_file():
            out._resume(json.loads(manifest.read_text(encoding="utf-8")))
        elif path.is_dir() and any(path.iterdir()):
            raise InvalidArgumentError(
                f"--output {path} is not empty and holds no inferd batch job; give a new or "
                "empty folder"
            )
        else:
            path.mkdir(parents=True, exist_ok=True)
            out._save()
        out._tidy()
        return out

    def _resume(self, saved: dict[str, Any]) -> None:
        old = saved.get("job", {})
        if saved.get("format") != FORMAT_VERSION or old != self._identity:
            what = ", ".join(_differences(old, self._identity)) or "its format"
            raise InvalidArgumentError(
                f"--output {self.path} holds the output of another job (it differs in: {what}); "
                "give another folder, or delete this one to start over"
            )
        self.finished = {int(k): v for k, v in saved.get("finished", {}).items()}

    def _save(self) -> None:
        body = {
            "format": FORMAT_VERSION,
            "job": self._identity,
            "shards": self._shard_count,
            "finished": {str(k): v for k, v in sorted(self.finished.items())},
        }
        _write_atomically(self.path / MANIFEST, json.dumps(body, indent=1) + "\n")

    def _tidy(self) -> None:
        """Drop what unfinished shards left: temporary files, shard files, bad-row lines."""
        keep = {Shard(i, 0, 0).file_name for i in self.finished}
        for child in self.path.iterdir():
            name = child.name
            stale_tmp = name.startswith(".part-") and name.endswith(".tmp")
            stale_part = name.startswith("part-") and name.endswith(".parquet") and name not in keep
            if stale_tmp or stale_part:
                child.unlink()
        bad = self.path / BAD_ROWS
        if bad.is_file():
            lines = [
                line
                for line in bad.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("shard") in self.finished
            ]
            _write_atomically(bad, "".join(line + "\n" for line in lines))

    def is_finished(self, shard: Shard) -> bool:
        return shard.index in self.finished

    def finish_shard(self, shard: Shard, table: Any, bad: Iterable[tuple[int, str]]) -> None:
        """Write one shard's table and bad rows, then record it as finished."""
        import pyarrow.parquet as pq

        final = self.path / shard.file_name
        tmp = self.path / f".{shard.file_name}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        bad_rows = sorted(bad)
        if bad_rows:
            with open(self.path / BAD_ROWS, "a", encoding="utf-8") as f:
                for row, reason in bad_rows:
                    f.write(json.dumps({"row": row, "shard": shard.index, "reason": reason}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        self.finished[shard.index] = {"rows": table.num_rows, "bad_rows": len(bad_rows)}
        self._save()
