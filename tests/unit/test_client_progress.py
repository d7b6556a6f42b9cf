"""``inferd.client.progress``: the one rule for live bars (a terminal, not quiet) and the bar the
analyzer and the optimizer draw."""

from __future__ import annotations

import io

import pytest

from inferd.client.progress import BarProgress, interactive


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_only_on_a_terminal_and_not_when_quiet() -> None:
    assert interactive(_Terminal())
    assert not interactive(_Terminal(), quiet=True)
    assert not interactive(io.StringIO())


def test_the_bar_counts_and_keeps_its_lines() -> None:
    rich_console = pytest.importorskip("rich.console")
    out = io.StringIO()
    bar = BarProgress("candidates", rich_console.Console(file=out, width=100))
    bar.add_total(2)
    bar.add_total(1)
    bar.detail("fp16: exporting")
    bar.line("fp16: [not markup] 12 infer/s")
    bar.advance()
    assert bar.counts == (1, 3)
    bar.close()
    assert "fp16: [not markup] 12 infer/s" in out.getvalue()


def test_rich_bar_builds_the_columns_named_in_order() -> None:
    rich_console = pytest.importorskip("rich.console")
    from inferd.client.progress import BAR, COUNT, ELAPSED, REMAINING, rich_bar

    out = io.StringIO()
    bar = rich_bar(
        "[bold]{task.description}", BAR, COUNT, ELAPSED, "{task.fields[rate]} rows/s", REMAINING,
        console=rich_console.Console(file=out, width=120),
    )  # fmt: skip
    assert [type(column).__name__ for column in bar.columns] == [
        "TextColumn", "BarColumn", "MofNCompleteColumn", "TimeElapsedColumn", "TextColumn",
        "TimeRemainingColumn",
    ]  # fmt: skip
    assert not bar.live.transient
    task = bar.add_task("rows", total=4, rate="12")
    bar.advance(task, 3)
    bar.console.print(bar.make_tasks_table(bar.tasks))
    shown = out.getvalue()
    assert "rows" in shown
    assert "3/4" in shown
    assert "12 rows/s" in shown


def test_the_batch_and_distill_bars_are_rich_bars() -> None:
    pytest.importorskip("rich")
    from inferd.cli.distill_progress import RichProgress as DistillBar
    from inferd.tools.batch.progress import RichProgress as BatchBar

    out = io.StringIO()
    batch = BatchBar(out)
    batch.start(10, 2)
    batch.advance(3, 1)
    table = batch._progress.make_tasks_table(batch._progress.tasks)
    batch._progress.console.print(table)
    batch.stop()
    assert "5/10" in out.getvalue()
    assert "1 bad" in out.getvalue()
    distill = DistillBar()
    try:
        distill.phase("training", 8)
        distill.advance(2, loss=0.5)
        columns = [type(column).__name__ for column in distill._bar.columns]
        assert columns[1:5] == [
            "BarColumn", "MofNCompleteColumn", "TimeElapsedColumn", "TimeRemainingColumn",
        ]  # fmt: skip
        assert distill._bar.tasks[0].fields["loss"] == "loss 0.50000"
    finally:
        distill.close()
