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


def test_the_live_line_shows_an_llm_windows_ttft_itl_and_token_rate() -> None:
    from inferd.tools.perf.llm_metrics import LlmSample, llm_figures

    screen = Terminal()
    progress = progress_for(False, screen)
    assert isinstance(progress, LiveProgress)
    progress.start_point("concurrency 2", 10)
    progress.window(1, 20.0, 50_000.0, 2)
    # one streamed answer: first token at 12 ms, 11 tokens by 32 ms, in a 1 s window
    sample = LlmSample(12_000_000, 32_000_000, 33_000_000, 5, 11, streamed=True)
    progress.llm_window(1, llm_figures([sample], 1_000_000_000))
    text = screen.getvalue()
    progress.end_point(None)  # type: ignore[arg-type]
    assert "20.0 infer/sec" in text
    assert "TTFT p50 12,000 usec" in text
    assert "ITL p50 2,000 usec" in text
    assert "11.0 output tokens/sec" in text
