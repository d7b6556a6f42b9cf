"""What the user sees while the analyzer works: a rich progress bar over the measurements with
an estimate of the time left, and one line per configuration measured."""

from __future__ import annotations

from typing import Any, Protocol

from inferd.tools.analyze.objective import Goals, Measurement, Verdict
from inferd.tools.perf import LoadPoint
from inferd.tools.perf.driver import NoProgress

__all__ = ["QuietReporter", "Reporter", "RichReporter"]


class Reporter(Protocol):
    def add_total(self, count: int) -> None:
        """``count`` more measurements are planned."""
        ...

    def note(self, text: str) -> None: ...

    def start(self, model: str, label: str, describe: str) -> None: ...

    def done(self, measurement: Measurement, verdict: Verdict) -> None: ...

    # inferd perf's Progress protocol, for the windows of the running measurement
    def start_point(self, label: str, max_trials: int) -> None: ...

    def window(self, index: int, throughput: float, latency_us: float, in_flight: int) -> None: ...

    def end_point(self, point: LoadPoint) -> None: ...

    def close(self) -> None: ...


def result_line(measurement: Measurement, verdict: Verdict, goals: Goals) -> str:
    if measurement.error is not None:
        return f"{measurement.model} {measurement.label}: failed: {measurement.error}"
    point = verdict.point
    parts = [f"{measurement.model} {measurement.label}:"]
    if verdict.value is None or point is None:
        parts.append("no load point qualifies")
    elif goals.maximise:
        parts.append(f"{verdict.value:.1f} infer/s at concurrency {point.concurrency}")
    else:
        parts.append(
            f"{goals.percentile} {verdict.value:.3f} ms at concurrency {point.concurrency}"
        )
    if measurement.memory_mb is not None:
        parts.append(f"{measurement.memory_mb:.0f} MB")
    if not verdict.feasible and verdict.value is not None:
        failed = [c.name for c in verdict.checks if not c.passed]
        parts.append("(misses " + ", ".join(failed) + ")")
    return " ".join(parts)


class QuietReporter(NoProgress):
    """Prints nothing but the lines of results and notes (``--quiet`` or not a terminal)."""

    def __init__(self, goals: Goals, *, lines: bool = True) -> None:
        self._goals = goals
        self._lines = lines

    def add_total(self, count: int) -> None:
        pass

    def note(self, text: str) -> None:
        if self._lines:
            print(text, flush=True)

    def start(self, model: str, label: str, describe: str) -> None:
        pass

    def done(self, measurement: Measurement, verdict: Verdict) -> None:
        if self._lines:
            print(result_line(measurement, verdict, self._goals), flush=True)

    def close(self) -> None:
        pass


class RichReporter:
    """A live bar: measurements done of those planned, elapsed time, time left."""

    def __init__(self, goals: Goals, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._goals = goals
        self._console = console or Console()
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[detail]}"),
            console=self._console,
            transient=True,
        )
        self._task = self._progress.add_task("configs", total=0, detail="")
        self._total = 0
        self._current = ""
        self._progress.start()

    @property
    def counts(self) -> tuple[int, int]:
        """(measurements done, measurements planned)."""
        task = self._progress.tasks[0]
        return int(task.completed), int(task.total or 0)

    def add_total(self, count: int) -> None:
        self._total += count
        self._progress.update(self._task, total=self._total)

    def note(self, text: str) -> None:
        self._progress.console.print(text, markup=False, highlight=False)

    def start(self, model: str, label: str, describe: str) -> None:
        self._current = f"{model} {label}"
        self._progress.update(self._task, detail=self._current)

    def done(self, measurement: Measurement, verdict: Verdict) -> None:
        line = result_line(measurement, verdict, self._goals)
        self._progress.console.print(line, markup=False, highlight=False)
        self._progress.advance(self._task)

    def start_point(self, label: str, max_trials: int) -> None:
        self._progress.update(self._task, detail=f"{self._current}, {label}")

    def window(self, index: int, throughput: float, latency_us: float, in_flight: int) -> None:
        self._progress.update(
            self._task, detail=f"{self._current}, window {index}: {throughput:.0f} infer/s"
        )

    def end_point(self, point: LoadPoint) -> None:
        pass

    def close(self) -> None:
        self._progress.stop()
