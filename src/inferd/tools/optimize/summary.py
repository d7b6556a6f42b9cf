"""The terminal table at the end of a run: every candidate, its figures against the baseline's,
and the verdict."""

from __future__ import annotations

from typing import Any

from inferd.tools.optimize.decide import Decision, Goals, Outcome
from inferd.tools.optimize.run import OptimizeResult

__all__ = ["reason_lines", "short_verdict", "size_text", "summary_table", "verdict_line"]


def verdict_line(result: OptimizeResult, goals: Goals) -> str:
    decision = result.decision
    if decision.kept_baseline:
        return "no candidate qualified and paid: the baseline stays"
    text = f"winner: {decision.winner}, {decision.gain:.2f}x the baseline's {goals.objective}"
    if result.written is not None:
        where = "a new model" if result.written.new_model else "a new version"
        text += f"; written as {where}: {result.written.model} version {result.written.version}"
    return text


def size_text(size_bytes: int) -> str:
    if size_bytes <= 0:
        return "-"
    if size_bytes < 1_000_000:
        return f"{size_bytes / 1e3:.1f} kB"
    return f"{size_bytes / 1e6:.1f} MB"


def short_verdict(outcome: Outcome, decision: Decision) -> str:
    if outcome.kind == "baseline":
        return "kept" if decision.kept_baseline else "replaced"
    if outcome.name == decision.winner:
        return "chosen"
    if outcome.skipped is not None:
        return "skipped"
    why = decision.reasons.get(outcome.name, "")
    if "accuracy budget" in why:
        return "too inaccurate"
    if "latency budget" in why:
        return "too slow"
    return "qualified"


def summary_table(result: OptimizeResult, goals: Goals) -> Any:
    """The figures of every candidate; :func:`reason_lines` say why each one lost."""
    from rich.table import Table

    decision = result.decision
    batch = decision.batch_size
    baseline = result.outcomes[0]
    base_point = baseline.point(batch)
    metric = baseline.quality.metric if baseline.quality else "metric"
    table = Table(title=f"candidates measured on {result.device} (CPU: {result.cpu_summary})")
    columns = (
        "candidate",
        metric,
        f"b{batch} infer/s",
        "x baseline",
        f"b{batch} p50 ms",
        "size",
        "verdict",
    )
    for column in columns:
        table.add_column(
            column,
            justify="left" if column in ("candidate", "verdict") else "right",
            no_wrap=True,
        )
    for outcome in result.outcomes:
        point = outcome.point(batch)
        ratio = (
            f"{point.throughput / base_point.throughput:.2f}"
            if point and base_point and base_point.throughput > 0
            else "-"
        )
        table.add_row(
            outcome.name,
            f"{outcome.quality.value:.4f}" if outcome.quality else "-",
            f"{point.throughput:,.0f}" if point else "-",
            ratio,
            f"{point.p50_ms:.3f}" if point else "-",
            size_text(outcome.size_bytes),
            short_verdict(outcome, decision),
        )
    return table


def reason_lines(result: OptimizeResult) -> list[str]:
    """One line per candidate that did not win: why."""
    decision = result.decision
    return [
        f"  {outcome.name}: {decision.reasons[outcome.name]}"
        for outcome in result.outcomes
        if outcome.name in decision.reasons
    ]
