"""The terminal summary: per model, the default config beside the best one, the margin, and the
verdict on each constraint (a rich table)."""

from __future__ import annotations

from typing import Any

from inferd.tools.analyze.objective import Measurement, Outcome, Verdict

__all__ = ["summary_table"]


def _settings(m: Measurement | None) -> dict[str, str]:
    if m is None:
        return {}
    c = m.candidate
    return {
        "instances": str(c.instances),
        "max_batch_size": str(c.max_batch_size),
        "dynamic batching": "on" if c.dynamic_batching else "off",
        "queue delay (µs)": str(c.max_queue_delay_us) if c.dynamic_batching else "-",
        "preferred batch sizes": ",".join(str(s) for s in c.preferred_batch_sizes) or "-",
        "intra-op threads": "auto" if c.intra_op_threads is None else str(c.intra_op_threads),
        "inter-op threads": "auto" if c.inter_op_threads is None else str(c.inter_op_threads),
    }


def _figures(outcome: Outcome, m: Measurement | None) -> dict[str, str]:
    if m is None:
        return {}
    goals = outcome.goals
    verdict: Verdict = outcome.verdict(m)
    point = verdict.point
    rows = {
        "objective": "-" if verdict.value is None else _value(verdict.value, goals.maximise),
        "at concurrency": "-" if point is None else str(point.concurrency),
        f"{goals.percentile} latency": "-"
        if point is None
        else f"{point.latency(goals.percentile) / 1000:.3f} ms",
        "memory": "not measured" if m.memory_mb is None else f"{m.memory_mb:.1f} MB",
        "measured": "once" if m.runs == 1 else f"{m.runs} times (mean)",
    }
    for check in verdict.checks:
        rows[check.name] = ("pass" if check.passed else "FAIL") + f" ({check.detail})"
    if m.error:
        rows["error"] = m.error
    return rows


def _value(value: float, maximise: bool) -> str:
    return f"{value:.1f} infer/s" if maximise else f"{value:.3f} ms"


def summary_table(outcome: Outcome, measured_now: int, resumed: int) -> Any:
    """A rich Table for one model."""
    from rich.table import Table

    best, default = outcome.best, outcome.default
    title = (
        f"{outcome.model}: {len(outcome.measurements)} configurations "
        f"({measured_now} measurements in this run, {resumed} from earlier runs)"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("")
    table.add_column("default")
    label = "best" if best is None else f"best ({best.label})"
    table.add_column(label, style="bold")
    left = {**_settings(default), **_figures(outcome, default)}
    right = {**_settings(best), **_figures(outcome, best)}
    for name in dict.fromkeys([*left, *right]):
        table.add_row(name, left.get(name, "-"), right.get(name, "-"))
    margin = outcome.margin()
    if best is None:
        table.caption = "no configuration met every constraint"
    elif best.is_default:
        table.caption = "the default config is the best measured"
    elif outcome.best_matches_default:
        table.caption = (
            "the best has the default's settings: the margin between them "
            f"({(margin or 0.0) * 100:+.1f}%) is measurement noise"
        )
    elif margin is not None:
        better = "more throughput" if outcome.goals.maximise else "lower latency"
        table.caption = f"margin: {margin * 100:+.1f}% {better} than the default"
    return table
