"""The files and the table an analysis leaves: results.csv, report.html (offline, with the Pareto
front and hover text naming each config), the terminal summary and the written configs."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from inferd.codecs.model_config import parse_pbtxt
from inferd.tools.analyze.configs import candidate_of, facts_of, load_base_config
from inferd.tools.analyze.objective import Goals, Measurement, Outcome, PointFigures, judge
from inferd.tools.analyze.outputs import OutputPlan, write_outputs
from inferd.tools.analyze.report_csv import COLUMNS, write_csv
from inferd.tools.analyze.report_html import render_html
from inferd.tools.analyze.runner import ModelRun
from inferd.tools.analyze.space import Candidate, default_space
from inferd.tools.analyze.summary import summary_table

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
GOALS = Goals(latency_budget_ms=3.0, max_memory_mb=200)


def point(concurrency: int, throughput: float, p99_ms: float) -> PointFigures:
    us, throughput = p99_ms * 1000, float(throughput)
    return PointFigures(
        concurrency, throughput, {"avg": us / 2, "p50": us / 2, "p90": us, "p95": us, "p99": us}
    )


def measurements() -> list[Measurement]:
    return [
        Measurement(
            "simple",
            "default",
            Candidate(2, 8, False),
            (point(1, 1000, 1.0), point(4, 2000, 2.5)),
            100.0,
        ),
        Measurement(
            "simple",
            "i1-b8-q100",
            Candidate(1, 8, True, 100),
            (point(1, 900, 1.2), point(4, 2600, 2.9)),
            110.0,
        ),
        Measurement(
            "simple",
            "i2-b8-q1000",
            Candidate(2, 8, True, 1000),
            (point(1, 500, 2.0), point(4, 3000, 4.0)),
            120.0,
        ),
        Measurement("simple", "i4-b8-off", Candidate(4, 8, False), (), None, "load failed: no"),
    ]


def outcome() -> Outcome:
    return judge("simple", measurements(), GOALS)


def test_the_best_is_the_fastest_within_budget() -> None:
    result = outcome()
    assert result.best is not None
    assert result.best.key == "i1-b8-q100"
    assert result.margin() == pytest.approx(0.3)


def test_csv_has_a_row_per_load_point_and_one_for_a_failure(tmp_path: Path) -> None:
    path = tmp_path / "results.csv"
    write_csv(path, [outcome()])
    with path.open() as text:
        rows = list(csv.DictReader(text))
    assert tuple(rows[0]) == COLUMNS
    assert len(rows) == 2 + 2 + 2 + 1
    best_rows = [r for r in rows if r["best"] == "True"]
    assert {r["config"] for r in best_rows} == {"i1-b8-q100"}
    assert best_rows[1]["inferences_per_second"] == "2600.000"
    failed = rows[-1]
    assert failed["error"] == "load failed: no"
    assert failed["feasible"] == "False"
    assert failed["concurrency"] == ""


def test_html_is_self_contained_with_the_front_and_named_points() -> None:
    text = render_html([outcome()], "inferd analyze: simple", ["a note"])
    assert "<script" in text
    assert "Plotly" in text
    assert '<script src="https://cdn.plot.ly' not in text  # plotly.js is inside the file
    assert text.count("plotly.js v") == 1  # included once, by the first chart
    assert "Pareto front" in text
    # the hover text of a point names its config (plotly escapes the <br> in its JSON)
    hover = "i2-b8-q1000<br>2 instances, max batch 8, dynamic batching, delay 1000 µs"
    assert hover.replace("<", "\\u003c").replace(">", "\\u003e") in text
    assert "server memory per configuration" in text
    assert "Best: <b>i1-b8-q100</b>" in text
    assert "a note" in text


def test_summary_names_default_best_margin_and_verdicts() -> None:
    console = Console(file=io.StringIO(), width=160, record=True)
    console.print(summary_table(outcome(), measured_now=3, resumed=1))
    text = console.export_text()
    assert "best (i1-b8-q100)" in text
    assert "+30.0% more throughput" in text
    assert "p99 latency ≤ 3 ms" in text
    assert "pass (2.900 ms)" in text
    assert "3 measurements in this run, 1 from earlier runs" in " ".join(text.split())


def test_outputs_write_configs_reports_and_apply(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    base = load_base_config(repo / "simple", None)
    space = default_space(facts_of(base), 2)
    run = ModelRun("simple", base, space, "grid", 3, outcome(), 3, 1)
    results = tmp_path / "results"
    results.mkdir()
    lines = write_outputs(
        [run], GOALS, OutputPlan(results, repo, output_repository=tmp_path / "out"), ["n"]
    )
    written = results / "configs" / "simple" / "config.pbtxt"
    assert any(str(written) in line for line in lines)
    config = parse_pbtxt(written.read_text(), "written")
    assert candidate_of(config) == Candidate(1, 8, True, 100)
    assert "+30.0% against the model's own config" in written.read_text()
    assert (tmp_path / "out" / "simple" / "1" / "model.onnx").is_file()
    assert (results / "results.csv").is_file()
    assert (results / "report.html").is_file()
    # in place: the original kept beside
    write_outputs([run], GOALS, OutputPlan(results, repo, apply=True), [])
    assert (repo / "simple" / "config.pbtxt.orig").is_file()
    assert candidate_of(load_base_config(repo / "simple", None)) == Candidate(1, 8, True, 100)


def test_a_best_with_the_defaults_settings_is_called_noise() -> None:
    default, same = measurements()[0], measurements()[0]
    same = Measurement(
        "simple", "i2-b8-off", default.candidate, (point(1, 1100, 1.0), point(4, 2100, 2.5)), 100.0
    )
    result = judge("simple", [default, same], GOALS)
    assert result.best is same
    assert result.best_matches_default
    console = Console(file=io.StringIO(), width=160, record=True)
    console.print(summary_table(result, measured_now=2, resumed=0))
    assert "measurement noise" in console.export_text()
    assert not outcome().best_matches_default


def test_the_progress_bar_counts_measurements_and_prints_each_result() -> None:
    from inferd.tools.analyze.objective import evaluate
    from inferd.tools.analyze.progress import RichReporter

    console = Console(file=io.StringIO(), width=160, force_terminal=True, record=True)
    reporter = RichReporter(GOALS, console=console)
    reporter.add_total(2)
    for m in measurements()[:2]:
        reporter.start(m.model, m.label, m.candidate.describe())
        reporter.start_point("concurrency 1", 10)
        reporter.window(1, 123.0, 456.0, 1)
        reporter.done(m, evaluate(m, GOALS))
    assert reporter.counts == (2, 2)
    reporter.close()
    text = console.export_text()
    assert "simple default: 2000.0 infer/s at concurrency 4 100 MB" in text
    assert "simple i1-b8-q100: 2600.0 infer/s at concurrency 4 110 MB" in text
