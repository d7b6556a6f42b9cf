"""``report.html``: the run as one page that opens offline (plotly.js is inside it).

A table of every candidate (the winner and the baseline marked, the reason each other one lost),
quality against latency for every candidate with the accuracy limit drawn, throughput per batch
size, and the per-node sensitivity when an accuracy repair computed it.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from inferd.tools.optimize.decide import Goals, Outcome
from inferd.tools.optimize.run import OptimizeResult
from inferd.tools.report_html import HtmlPage

__all__ = ["render_html", "write_html"]

_ROWS = "tr.winner { background: #fff4c2; } tr.baseline { background: #e8f0fe; }"


def write_html(path: Path, result: OptimizeResult, goals: Goals, model: str) -> None:
    path.write_text(render_html(result, goals, model), encoding="utf-8")


def render_html(result: OptimizeResult, goals: Goals, model: str) -> str:
    decision = result.decision
    page = HtmlPage(f"inferd optimize: {model}", left_cells="td.name, td.why", row_styles=_ROWS)
    parts = [
        f"<p>Measured on {html.escape(result.device)} ({html.escape(result.device_reason)}). "
        f"CPU: {html.escape(result.cpu_summary)}. Objective: {goals.objective} at batch "
        f"{decision.batch_size}; accuracy budget {goals.budget.fraction * 100:g}%"
        + (
            f"; latency budget {goals.latency_budget_ms:g} ms"
            if goals.latency_budget_ms is not None
            else ""
        )
        + ".</p>",
    ]
    if decision.kept_baseline:
        parts.append("<p class='bad'>No candidate qualified and paid: the baseline stays.</p>")
    else:
        where = ""
        if result.written is not None:
            where = (
                f", written as {html.escape(result.written.model)} version {result.written.version}"
            )
        parts.append(
            f"<p class='good'>Winner: <b>{html.escape(decision.winner)}</b>, "
            f"{decision.gain:.2f}x the baseline's {goals.objective}{where}.</p>"
        )
    parts.append(_table(result))
    page.add(*parts)
    page.chart(_quality_figure(result, goals))
    page.chart(_throughput_figure(result))
    page.chart(_sensitivity_figure(result))
    return page.render()


def _table(result: OptimizeResult) -> str:
    decision = result.decision
    batches = sorted({p.batch_size for o in result.outcomes for p in o.speed})
    head = (
        "<tr><th>candidate</th><th>kind</th><th>metric</th>"
        + "".join(f"<th>b{b} infer/s</th><th>b{b} p50 ms</th>" for b in batches)
        + "<th>size MB</th><th>verdict</th></tr>"
    )
    rows = [head]
    for outcome in result.outcomes:
        css = ""
        if outcome.name == decision.winner:
            css = "winner"
        elif outcome.kind == "baseline":
            css = "baseline"
        quality = (
            f"{outcome.quality.metric} {outcome.quality.value:.4f}" if outcome.quality else "-"
        )
        cells = ""
        for b in batches:
            point = outcome.point(b)
            cells += (
                f"<td>{point.throughput:,.0f}</td><td>{point.p50_ms:.3f}</td>"
                if point
                else "<td>-</td><td>-</td>"
            )
        why = decision.reasons.get(outcome.name, "")
        if outcome.name == decision.winner:
            why = "chosen"
        elif outcome.kind == "baseline":
            why = "the model as served"
        notes = "".join(f"<br><small>{html.escape(n)}</small>" for n in outcome.notes)
        rows.append(
            f"<tr class='{css}'><td class='name'>{html.escape(outcome.name)}</td>"
            f"<td class='name'>{html.escape(outcome.kind)}</td><td>{html.escape(quality)}</td>"
            f"{cells}<td>{outcome.size_bytes / 1e6:.2f}</td>"
            f"<td class='why'>{html.escape(why)}{notes}</td></tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def _measured(result: OptimizeResult) -> list[Outcome]:
    return [o for o in result.outcomes if o.quality is not None and o.speed]


def _quality_figure(result: OptimizeResult, goals: Goals) -> Any:
    import plotly.graph_objects as go

    outcomes = _measured(result)
    if not outcomes:
        return None
    batch = result.decision.batch_size
    points = [(o, o.point(batch) or o.speed[0]) for o in outcomes]
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=[p.p50_ms for _, p in points],
            y=[o.quality.value for o, _ in points if o.quality is not None],
            mode="markers+text",
            text=[o.name for o, _ in points],
            textposition="top center",
            marker={"size": 11},
            name="candidates",
        )
    )
    baseline = result.outcomes[0]
    if baseline.quality is not None:
        limit = goals.budget.limit(baseline.quality.metric, baseline.quality.value)
        figure.add_hline(y=limit, line_dash="dash", annotation_text="accuracy limit")
    metric = baseline.quality.metric if baseline.quality else "quality"
    figure.update_layout(
        title=f"{metric} against p50 latency at batch {batch}",
        xaxis_title="p50 latency (ms)",
        yaxis_title=metric,
    )
    return figure


def _throughput_figure(result: OptimizeResult) -> Any:
    import plotly.graph_objects as go

    outcomes = _measured(result)
    if not outcomes:
        return None
    figure = go.Figure()
    batches = sorted({p.batch_size for o in outcomes for p in o.speed})
    for b in batches:
        figure.add_trace(
            go.Bar(
                name=f"batch {b}",
                x=[o.name for o in outcomes],
                y=[(o.point(b).throughput if o.point(b) else 0.0) for o in outcomes],  # type: ignore[union-attr]
            )
        )
    figure.update_layout(
        barmode="group", title="throughput by batch size", yaxis_title="inferences/s"
    )
    return figure


def _sensitivity_figure(result: OptimizeResult) -> Any:
    if not result.sensitivity:
        return None
    import plotly.graph_objects as go

    rows = result.sensitivity[:30]
    figure = go.Figure(
        go.Bar(
            x=[str(r.get("node", "")) for r in rows],
            y=[float(r.get("score", 0.0)) for r in rows],  # type: ignore[arg-type]
        )
    )
    figure.update_layout(
        title="per-node quantization sensitivity (worst first)", yaxis_title="score"
    )
    return figure
