"""The plan as one HTML page that opens offline: load, replicas and p99 over time, one line
per run (plotly; ``pip install 'inferd[plan]'``)."""

from __future__ import annotations

import html

import numpy as np

from inferd.tools.scaling.sweep import Plan

__all__ = ["plan_html"]


def plan_html(plan: Plan, title: str, summary: str) -> str:
    """A page with the figure and the summary text under it."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=(
            "load (requests per second offered; failed per second)",
            "replicas (set by the HPA) and ready pods",
            "latency p99 per report interval (ms)",
        ),
    )
    first = plan.runs[0].result
    hours = first.t_s / 3600
    fig.add_scatter(
        x=hours, y=first.offered_rps, name="offered", row=1, col=1, line={"color": "black"}
    )
    for i, run in enumerate(plan.runs):
        r = run.result
        lengths = np.diff(np.append(r.t_s, plan.duration_s))
        group = f"run{i}"
        fig.add_scatter(
            x=hours,
            y=r.failed / lengths,
            name=f"{run.label}: failed",
            legendgroup=group,
            row=1,
            col=1,
            line={"dash": "dot"},
        )
        fig.add_scatter(
            x=hours,
            y=r.replicas,
            name=f"{run.label}: replicas",
            legendgroup=group,
            row=2,
            col=1,
            line={"shape": "hv"},
        )
        fig.add_scatter(
            x=hours,
            y=r.ready,
            name=f"{run.label}: ready",
            legendgroup=group,
            row=2,
            col=1,
            line={"dash": "dot"},
            visible="legendonly",
        )
        fig.add_scatter(
            x=hours, y=r.p99_us / 1e3, name=f"{run.label}: p99", legendgroup=group, row=3, col=1
        )
    fig.update_yaxes(type="log", row=3, col=1)
    fig.update_xaxes(title_text="hours from the start", row=3, col=1)
    fig.update_layout(height=900, title=title, hovermode="x unified")
    body = fig.to_html(full_html=False, include_plotlyjs=True)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head><body>\n{body}\n"
        f"<pre>{html.escape(summary)}</pre>\n</body></html>\n"
    )
