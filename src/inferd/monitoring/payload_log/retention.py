"""The payload log's retention: which files the log holds, how many bytes they take, and which
to delete once they pass the byte cap or the age limit. Used by the writer thread only.

Only the log's own files are ever deleted: regular files (a symbolic link is neither followed
nor removed) directly in a model's folder directly under the log's directory, named as the log
names them (:func:`~inferd.monitoring.payload_log.files.is_log_file`: its closed files, and
the hidden ``.partial`` Parquet files a server that stopped without closing them left). A
folder is opened without following a link and a file removed relative to it, so a folder
swapped for a link in the meantime cannot send a deletion elsewhere. Anything else in the
directory is left alone.

The writer hands over each file it closes (:meth:`Retention.closed`); the files already there
when it starts are found by :meth:`Retention.scan`. A file's age is the time since its last
record was written (for files found at start: since it was last modified). The files being
written, one per model, are never deleted: :meth:`Retention.enforce` deletes the oldest closed
files until the closed and open files together fit under the cap.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inferd.core.payload_stats import RETENTION_REASONS, PayloadLogRetentionStats
from inferd.monitoring.payload_log.files import is_log_file, is_log_folder

__all__ = ["Retention"]

_log = logging.getLogger("inferd.payload_log")

_DIRECTORY = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass(order=True, slots=True)
class _File:
    newest_ns: int  # when its last record was written (the order files go in)
    folder: str
    name: str
    size: int = field(compare=False)


@contextlib.contextmanager
def _opened(name: str | Path, dir_fd: int | None = None) -> Iterator[int]:
    """A folder's descriptor; a model's folder (``dir_fd`` given) is opened without following
    a symbolic link (the log's directory itself is the operator's, and may be one)."""
    flags = _DIRECTORY if dir_fd is None else _DIRECTORY | _NOFOLLOW
    fd = os.open(name, flags, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


class Retention:
    """The closed files of the log, oldest first, and what was deleted. ``max_bytes`` (0: no
    cap) bounds every file of the log together; ``max_age_secs`` (0: no limit) how long a file
    is kept after its last record."""

    def __init__(self, directory: Path, max_bytes: int, max_age_secs: float) -> None:
        self._directory = directory
        self._max_bytes = max_bytes
        self._max_age_ns = int(max_age_secs * 1e9)
        self._files: list[_File] = []  # a heap: the oldest first
        self._closed_bytes = 0
        self._open_bytes = 0
        self._open_files = 0
        self._deleted_files = dict.fromkeys(RETENTION_REASONS, 0)
        self._deleted_bytes = dict.fromkeys(RETENTION_REASONS, 0)
        self._failing = False  # the last deletion failed (logged once until one succeeds)
        self._lock = threading.Lock()  # the counts read at scrape time

    def scan(self) -> None:
        """Find the files the log wrote before this writer started (a directory that cannot be
        read is logged: its files are then not counted)."""
        try:
            with _opened(self._directory) as top:
                for folder in os.scandir(top):
                    if is_log_folder(folder.name) and folder.is_dir(follow_symlinks=False):
                        try:
                            self._scan_folder(top, folder.name)
                        except OSError as exc:
                            _log.error(
                                "payload log: cannot list %s for retention: %s",
                                Path(self._directory, folder.name),
                                exc,
                            )
        except OSError as exc:
            _log.error("payload log: cannot list %s for retention: %s", self._directory, exc)

    def _scan_folder(self, top: int, folder: str) -> None:
        with _opened(folder, top) as fd:
            for entry in os.scandir(fd):
                if not is_log_file(folder, entry.name):
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed meanwhile
                    continue
                if stat.S_ISREG(info.st_mode):
                    self._add(_File(info.st_mtime_ns, folder, entry.name, info.st_size))

    def closed(self, path: Path, newest_ns: int) -> None:
        """The writer closed the file at ``path`` (its last record written at ``newest_ns``);
        nothing if the file is gone (an empty file removed after a failed write)."""
        try:
            info = os.lstat(path)
        except OSError:  # removed (it held no record), or out of reach: not counted
            return
        if stat.S_ISREG(info.st_mode):
            self._add(_File(newest_ns, path.parent.name, path.name, info.st_size))

    def _add(self, file: _File) -> None:
        with self._lock:
            heapq.heappush(self._files, file)
            self._closed_bytes += file.size

    def enforce(self, now_ns: int, open_sizes: Sequence[int]) -> None:
        """Delete the closed files past the age limit, then the oldest until every file
        (``open_sizes``: those being written) fits under the cap."""
        with self._lock:
            self._open_bytes = sum(open_sizes)
            self._open_files = len(open_sizes)
        files = self._files
        if self._max_age_ns:
            while files and now_ns - files[0].newest_ns >= self._max_age_ns:
                self._delete("max_age")
        if self._max_bytes:
            while files and self._closed_bytes + self._open_bytes > self._max_bytes:
                self._delete("max_bytes")

    def _delete(self, reason: str) -> None:
        """Delete the oldest closed file."""
        with self._lock:
            file = heapq.heappop(self._files)
        deleted = False
        try:
            with _opened(self._directory) as top, _opened(file.folder, top) as fd:
                info = os.lstat(file.name, dir_fd=fd)
                if stat.S_ISREG(info.st_mode):  # never a link put in its place
                    os.unlink(file.name, dir_fd=fd)
                    deleted = True
        except FileNotFoundError:
            pass  # removed by someone else: no longer on disk either way
        except OSError as exc:
            if not self._failing:
                self._failing = True
                _log.error(
                    "payload log: cannot delete %s/%s (%s): %s; it is no longer counted",
                    file.folder,
                    file.name,
                    reason,
                    exc,
                )
        with self._lock:
            self._closed_bytes -= file.size
            if deleted:
                self._deleted_files[reason] += 1
                self._deleted_bytes[reason] += file.size
        if deleted:
            self._failing = False
            _log.info(
                "payload log: deleted %s/%s (%d bytes, %s)",
                file.folder,
                file.name,
                file.size,
                reason,
            )

    def statistics(self) -> PayloadLogRetentionStats:
        with self._lock:
            return PayloadLogRetentionStats(
                disk_bytes=self._closed_bytes + self._open_bytes,
                disk_files=len(self._files) + self._open_files,
                deleted_files_max_bytes=self._deleted_files["max_bytes"],
                deleted_files_max_age=self._deleted_files["max_age"],
                deleted_bytes_max_bytes=self._deleted_bytes["max_bytes"],
                deleted_bytes_max_age=self._deleted_bytes["max_age"],
            )
