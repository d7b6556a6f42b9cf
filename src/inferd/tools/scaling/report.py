"""What a plan reports: a terminal table, a JSON document and a CSV of the time series (pure:
strings and dictionaries out; the CLI writes the files)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from inferd.tools.scaling.capacity import CapacityCurve
from inferd.tools.scaling.latency import share_above
from inferd.tools.scaling.sweep import Plan, PlanRun

__all__ = ["JSON_FORMAT", "ReportOptions", "csv_text", "json_text", "summary_text"]

JSON_FORMAT = "inferd-plan/1"


@dataclass(frozen=True)
class ReportOptions:
    slo_p99_us: float | None = None  # a latency objective: the share of requests slower
    pod_hour_cost: float | None = None  # a price per pod-hour


def _ms(us: float) -> str:
    if not math.isfinite(us):
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    return f"{us / 1e3:.3g} ms"


def _share(part: float, whole: float) -> str:
    if whole <= 0 or part <= 0:
        return "0"
    share = part / whole
    return f"{share:.2%}" if share >= 1e-4 else f"{share:.1e}"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"


def curve_text(curve: CapacityCurve) -> str:
    first, last = curve.points[0], curve.points[-1]
    return (
        f"one replica ({curve.source or 'capacity curve'}): peaks at {curve.max_rps:,.0f} req/s "
        f"(p99 {_ms(last.percentiles_us[99])}); at {first.rps:,.0f} req/s p50 "
        f"{_ms(first.percentiles_us[50])}, p99 {_ms(first.percentiles_us[99])}"
    )


def _run_row(run: PlanRun, options: ReportOptions) -> list[str]:
    t = run.result.totals
    row = [run.label, f"{t.pod_hours:,.1f}"]
    if options.pod_hour_cost is not None:
        row.append(f"{t.pod_hours * options.pod_hour_cost:,.2f}")
    row += [
        f"{t.min_replicas}/{t.mean_replicas:.1f}/{t.max_replicas}",
        f"{t.failed:,.0f} ({_share(t.failed, t.offered)})",
        f"{t.failed_scaling:,.0f}",
        f"{t.queued:,.0f} ({_share(t.queued, t.offered)})",
        _ms(t.p50_us),
        _ms(t.p99_us),
        _ms(t.worst_p99_us),
    ]
    if options.slo_p99_us is not None:
        late = share_above(run.result.histogram, options.slo_p99_us) * t.served
        row.append(_share(late + t.failed, t.offered))
    return row


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def summary_text(
    plan: Plan,
    curve: CapacityCurve,
    settings: Mapping[str, Any],
    options: ReportOptions,
    report_interval_s: int,
) -> str:
    """The plan for a terminal: the inputs in a few lines, then one row per run."""
    targets = ", ".join(
        f"{name}: {rps:,.0f} req/s" if rps is not None else f"{name}: never reached"
        for name, rps in plan.per_pod_rps.items()
    )
    lines = [
        curve_text(curve),
        f"per pod at each target: {targets}",
        f"traffic: {_duration(plan.duration_s)}, mean {plan.mean_rps:,.0f} req/s, "
        f"peak {plan.peak_rps:,.0f} req/s",
        f"pods: {settings['pod_start_s']:g} s pending + {settings['warm_up_s']:g} s warm-up before "
        f"taking traffic; HPA sync every {settings['sync_period_s']} s on {settings['window_s']} s "
        f"averages scraped every {settings['scrape_interval_s']} s",
        *(f"warning: {w}" for w in plan.warnings),
        "",
    ]
    header = ["run", "pod-hours"]
    if options.pod_hour_cost is not None:
        header.append("cost")
    header += [
        "replicas min/mean/max",
        "failed",
        "while scaling",
        "queued",
        "p50",
        "p99",
        f"worst p99 ({_duration(report_interval_s)})",
    ]
    if options.slo_p99_us is not None:
        header.append(f"over {_ms(options.slo_p99_us)} or failed")
    lines.append(_table([header, *(_run_row(r, options) for r in plan.runs)]))
    return "\n".join(lines)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _series(run: PlanRun) -> dict[str, list[float]]:
    r = run.result
    out = {
        "t_s": r.t_s.tolist(),
        "offered_rps": r.offered_rps.tolist(),
        "replicas": r.replicas.tolist(),
        "ready": r.ready.tolist(),
        "pods": r.pods.tolist(),
        "p50_us": r.p50_us.tolist(),
        "p99_us": r.p99_us.tolist(),
        "failed": r.failed.tolist(),
        "queued": r.queued.tolist(),
    }
    for name, values in r.usages.items():
        out[f"hpa_{name}"] = values.tolist()
    return out


def json_document(
    plan: Plan, settings: Mapping[str, Any], options: ReportOptions
) -> dict[str, Any]:
    runs = []
    for run in plan.runs:
        totals = asdict(run.result.totals)
        if options.pod_hour_cost is not None:
            totals["cost"] = run.result.totals.pod_hours * options.pod_hour_cost
        if options.slo_p99_us is not None:
            totals["share_over_slo"] = share_above(run.result.histogram, options.slo_p99_us)
        runs.append(
            {
                "label": run.label,
                "min_replicas": run.min_replicas,
                "max_replicas": run.max_replicas,
                "autoscaled": run.autoscaled,
                "totals": totals,
                "series": _series(run),
            }
        )
    doc: dict[str, Any] = _clean(
        {
            "format": JSON_FORMAT,
            "settings": dict(settings),
            "traffic": {
                "duration_s": plan.duration_s,
                "mean_rps": plan.mean_rps,
                "peak_rps": plan.peak_rps,
            },
            "per_pod_rps_at_target": plan.per_pod_rps,
            "warnings": list(plan.warnings),
            "runs": runs,
        }
    )
    return doc


def json_text(plan: Plan, settings: Mapping[str, Any], options: ReportOptions) -> str:
    return json.dumps(json_document(plan, settings, options), indent=2) + "\n"


def csv_text(plan: Plan) -> str:
    """Every run's time series, one row per run and report interval."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    usage_names = sorted({k for run in plan.runs for k in run.result.usages})
    writer.writerow(
        [
            "run",
            "t_s",
            "offered_rps",
            "replicas",
            "ready",
            "pods",
            "p50_ms",
            "p99_ms",
            "failed",
            "queued",
            *(f"hpa_{n}" for n in usage_names),
        ]
    )
    for run in plan.runs:
        r = run.result
        for i in range(len(r.t_s)):
            writer.writerow(
                [
                    run.label,
                    f"{r.t_s[i]:g}",
                    f"{r.offered_rps[i]:.2f}",
                    f"{r.replicas[i]:g}",
                    f"{r.ready[i]:.2f}",
                    f"{r.pods[i]:.2f}",
                    _num(r.p50_us[i] / 1e3),
                    _num(r.p99_us[i] / 1e3),
                    f"{r.failed[i]:.1f}",
                    f"{r.queued[i]:.1f}",
                    *(_num(float(r.usages[n][i])) if n in r.usages else "" for n in usage_names),
                ]
            )
    return out.getvalue()


def _num(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else ""
