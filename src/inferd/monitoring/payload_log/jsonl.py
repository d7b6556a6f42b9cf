"""A JSONL payload log file: one JSON object per line, appended as records come.

Lines are complete once written, so a file can be read (or tailed) while it is open.
"""

from __future__ import annotations

import bisect
import itertools
from pathlib import Path

from inferd.monitoring.payload_log.encode import Chunk

__all__ = ["JsonlSink"]


class JsonlSink:
    suffix = "jsonl"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("xb")  # never another file's name: refused if it exists
        self.size = 0

    def accepts(self, chunk: Chunk) -> bool:
        return True  # any record fits a JSONL file

    pending = 0  # records taken but not yet in the file: none, each write goes out at once

    def write(self, chunk: Chunk, start: int, room: int) -> tuple[int, int, int]:
        """Append the chunk's lines from ``start`` until about ``room`` bytes are written (at
        least one line). Returns how many were taken, how many are now in the file and the
        bytes written."""
        lines = chunk.lines[start:] if chunk.lines is not None else []
        ends = list(itertools.accumulate(map(len, lines)))
        # the lines up to and including the first that reaches ``room``
        taken = min(len(lines), bisect.bisect_left(ends, room) + 1)
        size = ends[taken - 1]
        self._file.write(b"".join(lines[:taken]))
        self._file.flush()
        self.size += size
        return taken, taken, size

    def close(self) -> tuple[int, int]:
        """Close the file; return the records and bytes that closing wrote (none here)."""
        self._file.close()
        return 0, 0

    def abort(self) -> None:
        """Close after a failure; what was written stays."""
        self._file.close()
