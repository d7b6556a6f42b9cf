"""A JSONL payload log file: one JSON object per line, appended as records come.

Lines are complete once written, so a file can be read (or tailed) while it is open. The file
is written unbuffered: after a failed write (a full disk) nothing waits in a buffer, and
:meth:`JsonlSink.abort` cuts the file back to its last whole line, or removes it if it holds
none.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import itertools
import os
from pathlib import Path

from inferd.monitoring.payload_log.encode import Chunk

__all__ = ["JsonlSink"]


class JsonlSink:
    suffix = "jsonl"

    def __init__(self, path: Path) -> None:
        self.path = path
        # never another file's name: refused if it exists
        self._file = path.open("xb", buffering=0)
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
        data = memoryview(b"".join(lines[:taken]))
        while data:  # an unbuffered write may take part of it
            count = self._file.write(data)
            if not count:
                raise OSError(errno.EIO, f"{self.path} took no bytes")
            data = data[count:]
        self.size += size
        return taken, taken, size

    def close(self) -> tuple[int, int]:
        """Close the file; return the records and bytes that closing wrote (none here)."""
        self._file.close()
        return 0, 0

    def abort(self) -> None:
        """Close after a failure: the lines written whole stay, a line cut short is cut off,
        and a file left with no line is removed."""
        try:
            if self.size:
                os.ftruncate(self._file.fileno(), self.size)
        finally:
            self._file.close()
            if not self.size:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
