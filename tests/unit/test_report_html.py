"""``inferd.tools.report_html``: the one frame of the analyzer's and the optimizer's
``report.html``, and the optimizer's report drawn in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.tools.optimize.decide import Decision, Goals, Outcome
from inferd.tools.optimize.metrics import Quality
from inferd.tools.optimize.report_html import render_html
from inferd.tools.optimize.run import OptimizeResult
from inferd.tools.optimize.speed import SpeedPoint
from inferd.tools.optimize.write import Written
from inferd.tools.report_html import HtmlPage


def test_a_page_escapes_its_title_and_carries_plotly_once() -> None:
    go = pytest.importorskip("plotly.graph_objects")
    page = HtmlPage("a <b> & c", left_cells="td.name", row_styles="tr.best { color: red; }")
    page.add("<p>one</p>", "<p>two</p>")
    page.chart(None)
    page.chart(go.Figure(go.Bar(x=["a"], y=[1])))
    page.chart(go.Figure(go.Bar(x=["b"], y=[2])))
    text = page.render()
    assert text.startswith("<!DOCTYPE html><html><head><meta charset='utf-8'>\n<title>a &lt;b")
    assert "<h1>a &lt;b&gt; &amp; c</h1>\n<p>one</p>\n<p>two</p>\n" in text
    assert "th { background: #f3f3f3; } td.name { text-align: left; }\n" in text
    assert "\ntr.best { color: red; }\n.bad { color: #b00020; }" in text
    assert text.count("plotly.js v") == 1  # the first chart carries it, the second uses it
    assert text.count("Plotly.newPlot") == 2
    assert text.endswith("</body></html>")


def _point(batch: int, throughput: float) -> SpeedPoint:
    return SpeedPoint(batch, 1, throughput, 1.5, 3.0, True)


def _result(*, kept: bool) -> OptimizeResult:
    outcomes = [
        Outcome(
            "baseline", "baseline", Quality("accuracy", 0.95), (_point(1, 100), _point(8, 500))
        ),
        Outcome("fp16", "fp16", Quality("accuracy", 0.949), (_point(1, 150), _point(8, 900))),
        Outcome("int8", "int8", skipped="no calibration data"),
    ]
    decision = Decision("baseline" if kept else "fp16", kept, {"int8": "not built"}, 1.8, 8)
    written = None if kept else Written("m", 2, Path("m/2"), False)
    sensitivity = [] if kept else [{"node": "MatMul_1", "score": 0.5}]
    return OptimizeResult(outcomes, decision, {}, written, "4 cores", sensitivity)


def test_the_optimize_report_names_the_winner_and_draws_its_charts() -> None:
    pytest.importorskip("plotly")
    text = render_html(_result(kept=False), Goals(latency_budget_ms=5.0), "m")
    assert "<title>inferd optimize: m</title>" in text
    assert "td.name, td.why { text-align: left; }" in text
    assert "tr.winner { background: #fff4c2; }" in text
    assert "latency budget 5 ms" in text
    assert "Winner: <b>fp16</b>, 1.80x the baseline's throughput, written as m version 2" in text
    assert text.count("plotly.js v") == 1
    assert text.count("Plotly.newPlot") == 3  # quality, throughput, sensitivity
    assert "MatMul_1" in text


def test_the_optimize_report_says_when_the_baseline_stays() -> None:
    pytest.importorskip("plotly")
    text = render_html(_result(kept=True), Goals(), "m")
    assert "No candidate qualified and paid: the baseline stays." in text
    assert "Winner:" not in text
    assert text.count("Plotly.newPlot") == 2  # no sensitivity was computed
