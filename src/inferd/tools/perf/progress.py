"""The live display while measuring: the load point, its windows so far, the last figures.

Drawn with rich on the error stream, and only when that stream is a terminal and the run is
not ``--quiet``: pipes and CSV-reading scripts see the reports alone.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from inferd.client.progress import interactive
from inferd.tools.perf.llm_metrics import LlmFigures
from inferd.tools.perf.summary import LoadPoint


class LiveProgress:
    """A one-line rich Live display, rewritten at each window."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        from rich.console import Console  # the perf extra; imported only when drawing
        from rich.live import Live

        self._console = Console(file=stream or sys.stderr)
        self._live: Any = Live(console=self._console, transient=True, auto_refresh=False)
        self._label = ""
        self._max = 0
        self._line = ""

    def start_point(self, label: str, max_trials: int) -> None:
        self._label, self._max = label, max_trials
        self._live.start()
        self._show(f"[bold]{label}[/bold]: first window…")

    def window(self, index: int, throughput: float, latency_us: float, in_flight: int) -> None:
        self._line = (
            f"[bold]{self._label}[/bold]  window {index}/{self._max}  "
            f"{throughput:,.1f} infer/sec  latency {latency_us:,.0f} usec  "
            f"in flight {in_flight}"
        )
        self._show(self._line)

    def llm_window(self, index: int, figures: LlmFigures) -> None:
        """The window's LLM figures after its throughput and latency (openai transport)."""
        self._show(self._line + "  " + llm_window_text(figures))

    def end_point(self, point: LoadPoint) -> None:
        self._live.stop()

    def _show(self, text: str) -> None:
        from rich.text import Text

        self._live.update(Text.from_markup(text), refresh=True)


def progress_for(quiet: bool, stream: IO[str] | None = None) -> LiveProgress | None:
    """A live display when it can be seen (a terminal, not quiet, rich installed), else None."""
    stream = stream or sys.stderr
    if not interactive(stream, quiet=quiet):
        return None
    try:
        return LiveProgress(stream)
    except ImportError:
        return None


def llm_window_text(figures: LlmFigures) -> str:
    """One window's TTFT, ITL and token rate, for the live display and ``-v``."""
    ttft = "n/a" if figures.ttft_us is None else f"{figures.ttft_us.percentiles[50]:,.0f} usec"
    itl = "n/a" if figures.itl_us is None else f"{figures.itl_us.percentiles[50]:,.0f} usec"
    return f"TTFT p50 {ttft}  ITL p50 {itl}  {figures.output_tokens_per_s:,.1f} output tokens/sec"
