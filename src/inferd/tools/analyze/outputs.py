"""Everything an analysis leaves behind: each model's best ``config.pbtxt`` (in the results
directory always; in a copy of the repository or in place when asked), ``results.csv`` and
``report.html``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from inferd.tools.analyze.configs import apply_candidate, write_config
from inferd.tools.analyze.objective import Goals
from inferd.tools.analyze.report_csv import write_csv
from inferd.tools.analyze.report_html import write_html
from inferd.tools.analyze.runner import ModelRun

__all__ = ["OutputPlan", "config_header", "write_outputs"]


@dataclass(frozen=True)
class OutputPlan:
    results_dir: Path
    repository: Path
    output_repository: Path | None = None
    apply: bool = False


def config_header(run: ModelRun, goals: Goals) -> str:
    """The comment on top of a written config: what it was chosen for and by how much."""
    outcome = run.outcome
    best = outcome.best
    assert best is not None
    verdict = outcome.verdict(best)
    lines = [f"Chosen by `inferd analyze` for {goals.objective}"]
    constraints = []
    if goals.latency_budget_ms is not None:
        constraints.append(f"{goals.percentile} latency <= {goals.latency_budget_ms:g} ms")
    if goals.min_throughput is not None:
        constraints.append(f"throughput >= {goals.min_throughput:g} infer/s")
    if goals.max_memory_mb is not None:
        constraints.append(f"memory <= {goals.max_memory_mb:g} MB")
    if constraints:
        lines[0] += " with " + ", ".join(constraints)
    if verdict.value is not None and verdict.point is not None:
        figure = (
            f"{verdict.value:.1f} infer/s"
            if goals.maximise
            else f"{goals.percentile} latency {verdict.value:.3f} ms"
        )
        rounds = f" (the mean of {best.runs} rounds)" if best.runs > 1 else ""
        lines.append(f"measured: {figure} at concurrency {verdict.point.concurrency}{rounds}")
    margin = outcome.margin()
    if best.is_default:
        lines.append("the model's own config was the best measured; it is unchanged")
    elif outcome.best_matches_default:
        lines.append("the same settings as the model's own config (now written out in full)")
    elif margin is not None:
        lines.append(f"{margin * 100:+.1f}% against the model's own config")
    lines.append(f"settings: {best.candidate.describe()}")
    return "\n".join(lines)


def write_outputs(
    runs: Sequence[ModelRun], goals: Goals, plan: OutputPlan, notes: Sequence[str]
) -> list[str]:
    """Write every file; return one line per file written, for the terminal."""
    written: list[str] = []
    for run in runs:
        best = run.outcome.best
        if best is None:
            written.append(f"{run.model}: no configuration met every constraint; no config written")
            continue
        config = run.base if best.is_default else apply_candidate(run.base, best.candidate)
        header = config_header(run, goals)
        model_dir = plan.repository / run.model
        copy_dir = plan.results_dir / "configs"
        copy_dir.mkdir(parents=True, exist_ok=True)
        path = write_config(model_dir, config, header, output_repository=copy_dir, copy=False)
        written.append(f"{run.model}: best config {path}")
        if plan.output_repository is not None:
            path = write_config(model_dir, config, header, output_repository=plan.output_repository)
            written.append(f"{run.model}: model copied with the best config to {path.parent}")
        if plan.apply:
            if best.is_default:
                written.append(f"{run.model}: --apply: the model's own config is the best; kept")
            else:
                path = write_config(model_dir, config, header, output_repository=None)
                written.append(
                    f"{run.model}: --apply: {path} rewritten (the old one is config.pbtxt.orig)"
                )
    outcomes = [run.outcome for run in runs]
    csv_path = plan.results_dir / "results.csv"
    write_csv(csv_path, outcomes)
    written.append(f"results: {csv_path}")
    html_path = plan.results_dir / "report.html"
    title = "inferd analyze: " + ", ".join(run.model for run in runs)
    write_html(html_path, outcomes, title, notes)
    written.append(f"report: {html_path}")
    return written
