"""What a command shows while it works, with one rule for every command: a live rich bar only
on a terminal (and not ``--quiet``); plain lines elsewhere (a pipe, a log, CI), never a redrawn
bar. :class:`BarProgress` is the bar the analyzer and the optimizer draw: items done of those
planned, elapsed time, time left and what is under way, with result lines printed above it;
:func:`rich_bar` builds every command's rich bar (this one, ``inferd distill``'s, a batch job's).
"""

from __future__ import annotations

import sys
from typing import IO, Any

__all__ = ["BAR", "COUNT", "ELAPSED", "REMAINING", "BarProgress", "interactive", "rich_bar"]

# the columns of a rich bar that :func:`rich_bar` names; any other column is a text template
BAR, COUNT, ELAPSED, REMAINING = "<bar>", "<done of total>", "<elapsed>", "<remaining>"
_COLUMNS = {
    BAR: "BarColumn",
    COUNT: "MofNCompleteColumn",
    ELAPSED: "TimeElapsedColumn",
    REMAINING: "TimeRemainingColumn",
}


def interactive(stream: IO[str] | None = None, *, quiet: bool = False) -> bool:
    """Whether to draw a live bar: ``stream`` (default stdout) is a terminal and the run is not
    quiet. Elsewhere a command prints plain lines."""
    return not quiet and (stream or sys.stdout).isatty()


def rich_bar(*columns: str, console: Any = None, transient: bool = False) -> Any:
    """A rich ``Progress`` (not started) with ``columns`` in order: :data:`BAR`, :data:`COUNT`,
    :data:`ELAPSED` and :data:`REMAINING` are rich's own columns, any other string a text column
    (a rich template such as ``"{task.fields[loss]}"``). ``console`` None: rich's console.
    Raises ImportError without rich."""
    from rich import progress

    made = [
        getattr(progress, _COLUMNS[column])() if column in _COLUMNS else progress.TextColumn(column)
        for column in columns
    ]
    return progress.Progress(*made, console=console, transient=transient)


class BarProgress:
    """A live bar over ``what`` (``configs``, ``candidates``): done of planned, elapsed time,
    time left, and a detail field; it disappears when closed, the printed lines stay."""

    def __init__(self, what: str, console: Any = None) -> None:
        from rich.console import Console

        self._progress = rich_bar(
            "[bold]{task.description}",
            BAR,
            COUNT,
            ELAPSED,
            "left",
            REMAINING,
            "{task.fields[detail]}",
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
