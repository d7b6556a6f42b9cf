"""``results.csv``: one row per load point of every measured configuration (a configuration that
failed to load gets one row with its error). A configuration measured more than once (``runs``)
shows the mean of its measurements."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from inferd.tools.analyze.objective import PERCENTILES, Outcome

__all__ = ["COLUMNS", "write_csv"]

COLUMNS = (
    "model",
    "config",
    "instances",
    "max_batch_size",
    "dynamic_batching",
    "max_queue_delay_us",
    "preferred_batch_sizes",
    "intra_op_threads",
    "inter_op_threads",
    "runs",
    "concurrency",
    "inferences_per_second",
    *(f"{p}_latency_us" for p in PERCENTILES),
    "stable",
    "errors",
    "memory_mb",
    "feasible",
    "objective",
    "best",
    "error",
)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def write_csv(path: Path, outcomes: Sequence[Outcome]) -> None:
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for outcome in outcomes:
            for m in outcome.measurements:
                verdict = outcome.verdict(m)
                c = m.candidate
                head = [
                    m.model,
                    m.label,
                    c.instances,
                    c.max_batch_size,
                    "on" if c.dynamic_batching else "off",
                    c.max_queue_delay_us if c.dynamic_batching else None,
                    "+".join(str(s) for s in c.preferred_batch_sizes) or None,
                    c.intra_op_threads if c.intra_op_threads is not None else "auto",
                    c.inter_op_threads if c.inter_op_threads is not None else "auto",
                    m.runs,
                ]
                tail = [
                    m.memory_mb,
                    verdict.feasible,
                    verdict.value,
                    outcome.best is not None and outcome.best.key == m.key,
                    m.error,
                ]
                if not m.points:
                    blank = [None] * (3 + len(PERCENTILES) + 1)
                    writer.writerow([_cell(v) for v in [*head, *blank, *tail]])
                for point in m.points:
                    figures = [
                        point.concurrency,
                        point.throughput,
                        *(point.latency_us.get(p) for p in PERCENTILES),
                        point.stable,
                        point.errors,
                    ]
                    writer.writerow([_cell(v) for v in [*head, *figures, *tail]])
