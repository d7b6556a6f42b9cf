"""Measuring the leading configurations again (pure): which ones, and how repeated measurements
of one configuration combine.

A search on a shared machine picks its best from single measurements, so the one that looks best
may only have been lucky. After the search the analyzer measures the model's own config and the
``confirm`` best feasible ones once more, one after the other, and judges each by the mean of
its measurements: the default and the leaders are then compared on the same footing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from inferd.tools.analyze.objective import PERCENTILES, Measurement, Outcome, PointFigures

__all__ = ["combine", "to_confirm"]


def to_confirm(first_round: Outcome, count: int, done: Collection[str] = ()) -> list[Measurement]:
    """The default (when it answered) and the ``count`` best feasible others, best first, by
    their first round (so a rerun picks the same ones), leaving out the keys in ``done`` (those
    already measured again)."""
    if count <= 0:
        return []
    goals = first_round.goals
    ranked = sorted(
        (
            m
            for m in first_round.measurements
            if not m.is_default and first_round.verdict(m).feasible
        ),
        key=lambda m: -first_round.verdict(m).score(goals),
    )[:count]
    chosen = [first_round.default] if first_round.default is not None else []
    chosen += ranked
    return [m for m in chosen if m.error is None and m.key not in done]


def combine(measurements: Sequence[Measurement]) -> list[Measurement]:
    """One measurement per model and key: the rounds of a key merged (throughput and each
    latency averaged per load point, the largest memory, the first error), in first-taken
    order."""
    groups: dict[tuple[str, str], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.model, m.key), []).append(m)
    return [_merge(group) for group in groups.values()]


def _merge(rounds: list[Measurement]) -> Measurement:
    if len(rounds) == 1:
        return rounds[0]
    first = rounds[0]
    failed = next((m for m in rounds if m.error is not None), None)
    if failed is not None:
        return replace(failed, repeat=max(m.repeat for m in rounds))
    by_level: dict[int, list[PointFigures]] = {}
    for m in rounds:
        for point in m.points:
            by_level.setdefault(point.concurrency, []).append(point)
    points = tuple(_mean(level, found) for level, found in sorted(by_level.items()))
    memories = [m.memory_mb for m in rounds if m.memory_mb is not None]
    return replace(
        first,
        points=points,
        memory_mb=max(memories) if memories else None,
        repeat=max(m.repeat for m in rounds),
    )


def _mean(concurrency: int, points: list[PointFigures]) -> PointFigures:
    n = len(points)
    keys = [k for k in PERCENTILES if all(k in p.latency_us for p in points)]
    return PointFigures(
        concurrency=concurrency,
        throughput=sum(p.throughput for p in points) / n,
        latency_us={k: sum(p.latency_us[k] for p in points) / n for k in keys},
        stable=all(p.stable for p in points),
        errors=sum(p.errors for p in points),
    )
