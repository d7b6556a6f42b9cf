"""What the user sees while the analyzer works: a rich progress bar over the measurements with
an estimate of the time left, and one line per configuration measured."""

from __future__ import annotations

from typing import Any, Protocol

from inferd.client.progress import BarProgress
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
    """A live bar (:class:`inferd.client.progress.BarProgress`): measurements done of those
    planned, elapsed time, time left, the configuration under way."""

    def __init__(self, goals: Goals, console: Any = None) -> None:
        self._goals = goals
        self._bar = BarProgress("configs", console)
        self._current = ""

    @property
    def counts(self) -> tuple[int, int]:
        """(measurements done, measurements planned)."""
        return self._bar.counts

    def add_total(self, count: int) -> None:
        self._bar.add_total(count)

    def note(self, text: str) -> None:
        self._bar.line(text)

    def start(self, model: str, label: str, describe: str) -> None:
        self._current = f"{model} {label}"
        self._bar.detail(self._current)

    def done(self, measurement: Measurement, verdict: Verdict) -> None:
        self._bar.line(result_line(measurement, verdict, self._goals))
        self._bar.advance()

    def start_point(self, label: str, max_trials: int) -> None:
        self._bar.detail(f"{self._current}, {label}")

    def window(self, index: int, throughput: float, latency_us: float, in_flight: int) -> None:
        self._bar.detail(f"{self._current}, window {index}: {throughput:.0f} infer/s")

    def end_point(self, point: LoadPoint) -> None:
        pass

    def close(self) -> None:
        self._bar.close()
