"""``report.html``: the analysis as one file that opens offline (plotly.js is inside it).

Per model: a table of every configuration (the best and the default marked), throughput against
latency for every load point of every configuration with the Pareto front drawn over them, and
the memory each configuration used. Hovering a point names its configuration.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inferd.tools.analyze.objective import Goals, Measurement, Outcome, pareto_front
from inferd.tools.report_html import HtmlPage

__all__ = ["render_html", "write_html"]

_ROWS = "tr.best { background: #fff4c2; } tr.default { background: #e8f0fe; }"


def write_html(path: Path, outcomes: Sequence[Outcome], title: str, notes: Sequence[str]) -> None:
    path.write_text(render_html(outcomes, title, notes), encoding="utf-8")


def render_html(outcomes: Sequence[Outcome], title: str, notes: Sequence[str]) -> str:
    page = HtmlPage(title, left_cells="td.name", row_styles=_ROWS)
    page.add(*(f"<p>{html.escape(note)}</p>" for note in notes))
    for outcome in outcomes:
        page.add(
            f"<h2>Model {html.escape(outcome.model)}</h2>", _verdict_text(outcome), _table(outcome)
        )
        page.chart(_latency_figure(outcome))
        page.chart(_memory_figure(outcome))
    return page.render()


def _verdict_text(outcome: Outcome) -> str:
    goals = outcome.goals
    if outcome.best is None:
        return "<p class='bad'>No configuration met every constraint.</p>"
    value = outcome.verdict(outcome.best).value
    margin = outcome.margin()
    text = (
        f"Best: <b>{html.escape(outcome.best.label)}</b> "
        f"({html.escape(outcome.best.candidate.describe())}), {_objective_text(goals, value)}"
    )
    if margin is not None and not outcome.best.is_default:
        text += f", {margin * 100:+.1f}% against the default"
    return f"<p class='good'>{text}.</p>"


def _objective_text(goals: Goals, value: float | None) -> str:
    if value is None:
        return "no value"
    if goals.maximise:
        return f"{value:.1f} infer/s"
    return f"{goals.percentile} latency {value:.3f} ms"


def _table(outcome: Outcome) -> str:
    goals = outcome.goals
    head = (
        "<tr><th>config</th><th>settings</th><th>objective</th><th>at concurrency</th>"
        f"<th>{goals.percentile} latency (ms)</th><th>memory (MB)</th><th>runs</th>"
        "<th>verdict</th></tr>"
    )
    rows = [head]
    ranked = sorted(outcome.measurements, key=lambda m: -outcome.verdict(m).score(goals))
    for m in ranked:
        verdict = outcome.verdict(m)
        css = "best" if outcome.best is not None and m.key == outcome.best.key else ""
        css = css or ("default" if m.is_default else "")
        point = verdict.point
        failed = [c for c in verdict.checks if not c.passed]
        why = "; ".join(f"{c.name}: {c.detail}" for c in failed) if failed else "meets all"
        rows.append(
            f"<tr class='{css}'><td class='name'>{html.escape(m.label)}</td>"
            f"<td class='name'>{html.escape(m.candidate.describe())}</td>"
            f"<td>{_objective_text(goals, verdict.value)}</td>"
            f"<td>{'' if point is None else point.concurrency}</td>"
            f"<td>{'' if point is None else f'{point.latency(goals.percentile) / 1000:.3f}'}</td>"
            f"<td>{'' if m.memory_mb is None else f'{m.memory_mb:.1f}'}</td>"
            f"<td>{m.runs}</td>"
            f"<td class='{'good' if verdict.feasible else 'bad'} name'>{html.escape(why)}</td></tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def _hover(m: Measurement, concurrency: int, throughput: float, latency_ms: float) -> str:
    return (
        f"{m.label}<br>{m.candidate.describe()}<br>concurrency {concurrency}: "
        f"{throughput:.1f} infer/s, {latency_ms:.3f} ms"
    )


def _latency_figure(outcome: Outcome) -> Any:
    import plotly.graph_objects as go

    goals = outcome.goals
    pct = goals.percentile
    figure = go.Figure()
    every: list[tuple[float, float, str]] = []
    best_key = outcome.best.key if outcome.best is not None else None
    for m in outcome.measurements:
        if not m.points:
            continue
        points = sorted(m.points, key=lambda p: p.concurrency)
        xs = [p.latency(pct) / 1000.0 for p in points]
        ys = [p.throughput for p in points]
        texts = [_hover(m, p.concurrency, p.throughput, x) for p, x in zip(points, xs, strict=True)]
        every += zip(xs, ys, texts, strict=True)
        style: dict[str, Any] = {"width": 1}
        if m.key == best_key:
            style = {"width": 4, "color": "#d4a000"}
        elif m.is_default:
            style = {"width": 3, "color": "#1f4e9e", "dash": "dash"}
        figure.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines+markers",
                name=m.label + (" (best)" if m.key == best_key else ""),
                line=style,
                hovertext=texts,
                hoverinfo="text",
            )
        )
    if not every:
        return None
    front = pareto_front([(x, y) for x, y, _ in every])
    figure.add_trace(
        go.Scatter(
            x=[every[i][0] for i in front],
            y=[every[i][1] for i in front],
            mode="lines+markers",
            name="Pareto front",
            line={"shape": "hv", "color": "#c0392b", "width": 2},
            marker={"size": 11, "symbol": "circle-open", "color": "#c0392b"},
            hovertext=["Pareto front: " + every[i][2] for i in front],
            hoverinfo="text",
        )
    )
    if goals.latency_budget_ms is not None:
        figure.add_vline(
            x=goals.latency_budget_ms, line_dash="dot", annotation_text="latency budget"
        )
    figure.update_layout(
        title=f"{outcome.model}: throughput against {pct} latency (one point per load point)",
        xaxis_title=f"{pct} latency (ms)",
        yaxis_title="inferences / s",
        height=560,
    )
    return figure


def _memory_figure(outcome: Outcome) -> Any:
    import plotly.graph_objects as go

    measured = [m for m in outcome.measurements if m.memory_mb is not None]
    if not measured:
        return None
    colours = ["#1b7f3b" if outcome.verdict(m).feasible else "#b00020" for m in measured]
    figure = go.Figure(
        go.Bar(
            x=[m.label for m in measured],
            y=[m.memory_mb for m in measured],
            marker_color=colours,
            hovertext=[f"{m.label}<br>{m.candidate.describe()}" for m in measured],
            hoverinfo="text+y",
        )
    )
    if outcome.goals.max_memory_mb is not None:
        figure.add_hline(y=outcome.goals.max_memory_mb, line_dash="dot", annotation_text="limit")
    figure.update_layout(
        title=f"{outcome.model}: server memory per configuration (green: meets every constraint)",
        yaxis_title="MB",
        height=420,
    )
    return figure
