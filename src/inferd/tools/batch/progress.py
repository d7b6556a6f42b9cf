"""The progress bar of a batch job: rows done of the total, rows/s, bad rows, time left.

Drawn with rich on the error stream when it is a terminal; elsewhere nothing is drawn (the
command prints its summary line either way), unless asked for (``--progress``): then a pipe or a
log gets a plain line at every tenth of the rows and at least every 30 s, never a redrawn bar.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Any, Protocol

from inferd.client.progress import BAR, COUNT, ELAPSED, REMAINING, interactive, rich_bar

__all__ = ["JobProgress", "LineProgress", "RichProgress", "progress_for"]


class JobProgress(Protocol):
    def start(self, total_rows: int, done_rows: int) -> None: ...

    def advance(self, rows: int, bad_rows: int) -> None: ...

    def stop(self) -> None: ...


class RichProgress:
    def __init__(self, stream: IO[str] | None = None) -> None:
        from rich.console import Console

        self._bad = 0
        self._progress: Any = rich_bar(
            "[bold]{task.description}",
            BAR,
            COUNT,
            "{task.fields[rate]} rows/s",
            "{task.fields[bad]} bad",
            ELAPSED,
            REMAINING,
            console=Console(file=stream or sys.stderr),
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


class LineProgress:
    """Sparse plain-text progress for a stream that is not a terminal: a line when another tenth
    of the rows is done, or ``every_s`` seconds after the last line, and one at the end."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream or sys.stderr
        self._every_s = every_s
        self._clock = clock
        self._total = self._done = self._bad = self._this_run = 0
        self._step = self._next = 1
        self._started = self._last = 0.0
        self._said_last_row = False

    def start(self, total_rows: int, done_rows: int) -> None:
        self._total, self._done = total_rows, done_rows
        self._step = max(1, total_rows // 10)
        self._next = (done_rows // self._step + 1) * self._step
        self._started = self._last = self._clock()

    def advance(self, rows: int, bad_rows: int) -> None:
        self._done += rows
        self._this_run += rows
        self._bad += bad_rows
        now = self._clock()
        if self._done >= self._next or now - self._last >= self._every_s:
            self._line(now)

    def stop(self) -> None:
        if self._said_last_row:  # the line at the last row says everything
            return
        self._line(self._clock())

    def _line(self, now: float) -> None:
        elapsed = now - self._started
        rate = f"{self._this_run / elapsed:,.0f}" if elapsed > 0 else "-"
        share = 100 * self._done / self._total if self._total else 100.0
        print(
            f"rows {self._done:,}/{self._total:,} ({share:.0f} %), {rate} rows/s, "
            f"{self._bad:,} bad, {elapsed:.0f} s",
            file=self._stream,
            flush=True,
        )
        self._next = (self._done // self._step + 1) * self._step
        self._last = now
        self._said_last_row = self._done >= self._total


def progress_for(enabled: bool | None, stream: IO[str] | None = None) -> JobProgress | None:
    """Progress when ``enabled`` (None: when the stream is a terminal): a rich bar on a terminal
    (when rich is installed), sparse plain lines on anything else."""
    stream = stream or sys.stderr
    if enabled is None:
        enabled = interactive(stream)
    if not enabled:
        return None
    if not stream.isatty():
        return LineProgress(stream)
    try:
        return RichProgress(stream)
    except ImportError:
        return LineProgress(stream)
