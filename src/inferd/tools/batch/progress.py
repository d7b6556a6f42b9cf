"""The progress bar of a batch job: rows done of the total, rows/s, bad rows, time left.

Drawn with rich on the error stream when it is a terminal; elsewhere nothing is drawn (the
command prints its summary line either way).
"""

from __future__ import annotations

import sys
from typing import IO, Any, Protocol

__all__ = ["JobProgress", "RichProgress", "progress_for"]


class JobProgress(Protocol):
    def start(self, total_rows: int, done_rows: int) -> None: ...

    def advance(self, rows: int, bad_rows: int) -> None: ...

    def stop(self) -> None: ...


class RichProgress:
    def __init__(self, stream: IO[str] | None = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bad = 0
        self._progress: Any = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} rows/s"),
            TextColumn("{task.fields[bad]} bad"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(file=stream or sys.stderr),
            transient=False,
        )
        self._task: Any = None

    def start(self, total_rows: int, done_rows: int) -> None:
        self._progress.start()
        self._task = self._progress.add_task("rows", total=total_rows, rate="-", bad=0)
        if done_rows:
            # rows of shards finished before a restart: shown done, not counted in the speed
            self._progress.update(self._task, completed=done_rows)
            self._progress.reset(self._task, completed=done_rows, rate="-", bad=0)

    def advance(self, rows: int, bad_rows: int) -> None:
        self._bad += bad_rows
        self._progress.advance(self._task, rows)
        speed = self._progress.tasks[0].speed
        self._progress.update(
            self._task, rate=f"{speed:,.0f}" if speed else "-", bad=f"{self._bad:,}"
        )

    def stop(self) -> None:
        self._progress.stop()


def progress_for(enabled: bool | None, stream: IO[str] | None = None) -> JobProgress | None:
    """A bar when ``enabled`` (None: when the stream is a terminal) and rich is installed."""
    stream = stream or sys.stderr
    if enabled is None:
        enabled = stream.isatty()
    if not enabled:
        return None
    try:
        return RichProgress(stream)
    except ImportError:
        return None
