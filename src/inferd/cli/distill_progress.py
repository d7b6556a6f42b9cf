"""What ``inferd distill`` shows while it works: a rich progress bar per phase (teacher outputs,
training with its running loss, the held-out check), or one line per phase when the output is not
a terminal."""

from __future__ import annotations

from typing import Any

from inferd.client.progress import BAR, COUNT, ELAPSED, REMAINING, rich_bar

__all__ = ["LineProgress", "RichProgress"]


class LineProgress:
    """One line per phase, and one at every tenth of a training phase with its recent loss."""

    def __init__(self, *, lines: bool = True) -> None:
        self._lines = lines
        self._what = ""
        self._total = self._done = self._next = 0
        self._losses: list[float] = []

    def _loss(self) -> str:
        tail = self._losses[-50:]
        return f", loss {sum(tail) / len(tail):.5f}" if tail else ""

    def phase(self, what: str, total: int) -> None:
        self._what, self._total, self._done, self._losses = what, total, 0, []
        self._next = max(1, total // 10)
        if self._lines:
            training = what.startswith("training")
            print(f"{what} ({total:,} steps)" if training else what, flush=True)

    def advance(self, count: int = 1, loss: float | None = None) -> None:
        self._done += count
        if loss is None:
            return
        self._losses.append(loss)
        if self._lines and self._done >= self._next:
            print(f"  {self._done:,}/{self._total:,} steps{self._loss()}", flush=True)
            self._next += max(1, self._total // 10)

    def note(self, text: str) -> None:
        if self._lines:
            print(text, flush=True)

    def close(self) -> None:
        pass


class RichProgress:
    """A rich bar for the current phase, with the loss averaged over the last steps."""

    def __init__(self) -> None:
        self._bar = rich_bar(
            "{task.description}", BAR, COUNT, ELAPSED, REMAINING, "{task.fields[loss]}"
        )
        self._bar.start()
        self._task: Any = None
        self._losses: list[float] = []

    def phase(self, what: str, total: int) -> None:
        if self._task is not None:
            self._bar.update(self._task, completed=self._bar.tasks[-1].total)
        self._losses = []
        self._task = self._bar.add_task(what, total=total, loss="")

    def advance(self, count: int = 1, loss: float | None = None) -> None:
        if self._task is None:
            return
        fields: dict[str, Any] = {}
        if loss is not None:
            self._losses = [*self._losses[-49:], loss]
            fields["loss"] = f"loss {sum(self._losses) / len(self._losses):.5f}"
        self._bar.update(self._task, advance=count, **fields)

    def note(self, text: str) -> None:
        self._bar.console.print(text)

    def close(self) -> None:
        self._bar.stop()
