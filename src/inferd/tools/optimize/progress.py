"""What the user sees while candidates are built and measured: a rich bar over the candidates
with the step under way, and one line per candidate as it finishes."""

from __future__ import annotations

from typing import Any, Protocol

from inferd.client.progress import BarProgress
from inferd.tools.optimize.decide import Outcome

__all__ = ["LineReporter", "Reporter", "RichReporter", "outcome_line"]


class Reporter(Protocol):
    def add_total(self, count: int) -> None: ...

    def step(self, candidate: str, what: str) -> None: ...

    def done(self, outcome: Outcome) -> None: ...

    def note(self, text: str) -> None: ...

    def close(self) -> None: ...


def outcome_line(outcome: Outcome) -> str:
    if outcome.skipped is not None:
        return f"{outcome.name}: skipped: {outcome.skipped}"
    parts = [f"{outcome.name}:"]
    if outcome.quality is not None:
        parts.append(f"{outcome.quality.metric} {outcome.quality.value:.4f}")
    for point in outcome.speed:
        parts.append(f"b{point.batch_size} {point.throughput:,.0f} infer/s")
    if outcome.size_bytes:
        size = outcome.size_bytes
        parts.append(f"{size / 1e3:.1f} kB" if size < 1_000_000 else f"{size / 1e6:.1f} MB")
    return " ".join(parts)


class LineReporter:
    """One line per candidate (``--quiet`` or not a terminal)."""

    def __init__(self, *, lines: bool = True) -> None:
        self._lines = lines

    def add_total(self, count: int) -> None:
        pass

    def step(self, candidate: str, what: str) -> None:
        pass

    def done(self, outcome: Outcome) -> None:
        if self._lines:
            print(outcome_line(outcome), flush=True)

    def note(self, text: str) -> None:
        if self._lines:
            print(text, flush=True)

    def close(self) -> None:
        pass


class RichReporter:
    """A live bar (:class:`inferd.client.progress.BarProgress`): candidates done of those
    planned, elapsed and remaining time, current step."""

    def __init__(self, console: Any = None) -> None:
        self._bar = BarProgress("candidates", console)

    def add_total(self, count: int) -> None:
        self._bar.add_total(count)

    def step(self, candidate: str, what: str) -> None:
        self._bar.detail(f"{candidate}: {what}")

    def done(self, outcome: Outcome) -> None:
        self._bar.line(outcome_line(outcome))
        self._bar.advance()

    def note(self, text: str) -> None:
        self._bar.line(text)

    def close(self) -> None:
        self._bar.close()
