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
