"""The live display: drawn on a terminal, absent on a pipe or with --quiet."""

from __future__ import annotations

import io

from inferd.tools.perf.progress import LiveProgress, progress_for


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_live_line() -> None:
    screen = Terminal()
    progress = progress_for(False, screen)
    assert isinstance(progress, LiveProgress)
    progress.start_point("concurrency 4", 10)
    progress.window(2, 1234.5, 321.0, 4)
    text = screen.getvalue()
    progress.end_point(None)  # type: ignore[arg-type]
    assert "concurrency 4" in text
    assert "window 2/10" in text
    assert "1,234.5 infer/sec" in text
    assert "in flight 4" in text


def test_pipes_and_quiet_runs_get_no_display() -> None:
    assert progress_for(False, io.StringIO()) is None
    assert progress_for(True, Terminal()) is None
