"""What a command shows while it works, with one rule for every command: a live rich bar only
on a terminal (and not ``--quiet``); plain lines elsewhere (a pipe, a log, CI), never a redrawn
bar. :class:`BarProgress` is the bar the analyzer and the optimizer draw: items done of those
planned, elapsed time, time left and what is under way, with result lines printed above it.
"""

from __future__ import annotations

import sys
from typing import IO, Any

__all__ = ["BarProgress", "interactive"]


def interactive(stream: IO[str] | None = None, *, quiet: bool = False) -> bool:
    """Whether to draw a live bar: ``stream`` (default stdout) is a terminal and the run is not
    quiet. Elsewhere a command prints plain lines."""
    return not quiet and (stream or sys.stdout).isatty()


class BarProgress:
    """A live bar over ``what`` (``configs``, ``candidates``): done of planned, elapsed time,
    time left, and a detail field; it disappears when closed, the printed lines stay."""

    def __init__(self, what: str, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[detail]}"),
            console=console or Console(),
            transient=True,
        )
        self._task = self._progress.add_task(what, total=0, detail="")
        self._total = 0
        self._progress.start()

    @property
    def counts(self) -> tuple[int, int]:
        """(items done, items planned)."""
        task = self._progress.tasks[0]
        return int(task.completed), int(task.total or 0)

    def add_total(self, count: int) -> None:
        self._total += count
        self._progress.update(self._task, total=self._total)

    def detail(self, text: str) -> None:
        self._progress.update(self._task, detail=text)

    def line(self, text: str) -> None:
        """Print ``text`` as it is (no markup) above the bar."""
        self._progress.console.print(text, markup=False, highlight=False)

    def advance(self) -> None:
        self._progress.advance(self._task)

    def close(self) -> None:
        self._progress.stop()
