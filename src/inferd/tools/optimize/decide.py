"""Which candidate wins: a pure function of the measured outcomes and the user's budgets.

A candidate qualifies when it was built and measured, its metric is within the accuracy budget
of the baseline's, and (with a latency budget) its p99 at the objective's batch size is within
it. Among those, the best objective wins, provided it beats the baseline by at least the
required gain; otherwise the baseline stays, and the decision says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inferd.tools.optimize.metrics import Budget, Quality
from inferd.tools.optimize.speed import SpeedPoint

__all__ = ["OBJECTIVES", "Decision", "Goals", "Outcome", "decide", "objective_value"]

OBJECTIVES = ("throughput", "latency", "size")


@dataclass(frozen=True)
class Outcome:
    """What happened to one candidate (the baseline included)."""

    name: str
    kind: str
    quality: Quality | None = None
    speed: tuple[SpeedPoint, ...] = ()
    size_bytes: int = 0
    memory_mb: float | None = None
    skipped: str | None = None  # why it was not built or not measured
    notes: tuple[str, ...] = ()
    recipe: dict[str, object] = field(default_factory=dict)
    build_s: float = 0.0

    def point(self, batch_size: int) -> SpeedPoint | None:
        return next((p for p in self.speed if p.batch_size == batch_size), None)


@dataclass(frozen=True)
class Goals:
    objective: str = "throughput"
    budget: Budget = field(default_factory=lambda: Budget(0.01))
    latency_budget_ms: float | None = None
    batch_size: int | None = None  # the batch size the objective is read at; None: the largest
    min_gain: float = 0.05  # the winner must beat the baseline by this share


@dataclass(frozen=True)
class Decision:
    winner: str  # a candidate's name, or the baseline's when nothing paid
    kept_baseline: bool
    reasons: dict[str, str]  # candidate -> why it did not qualify or did not win
    gain: float  # the winner's objective against the baseline's (1.0: the baseline)
    batch_size: int


def objective_batch(outcome: Outcome, goals: Goals) -> int:
    if goals.objective == "latency":
        return goals.batch_size or min((p.batch_size for p in outcome.speed), default=1)
    return goals.batch_size or max((p.batch_size for p in outcome.speed), default=1)


def objective_value(outcome: Outcome, goals: Goals, batch_size: int) -> float | None:
    """Larger is better: throughput, 1/latency, 1/size."""
    if goals.objective == "size":
        return 1.0 / outcome.size_bytes if outcome.size_bytes > 0 else None
    point = outcome.point(batch_size)
    if point is None:
        return None
    if goals.objective == "latency":
        return 1.0 / point.p50_ms if point.p50_ms > 0 else None
    return point.throughput


def _disqualified(outcome: Outcome, baseline: Outcome, goals: Goals, batch_size: int) -> str | None:
    if outcome.skipped is not None:
        return outcome.skipped
    if outcome.quality is None or baseline.quality is None:
        return "not evaluated"
    metric = baseline.quality.metric
    if not goals.budget.passes(metric, baseline.quality.value, outcome.quality.value):
        limit = goals.budget.limit(metric, baseline.quality.value)
        return (
            f"{metric} {outcome.quality.value:.4f} misses the accuracy budget "
            f"(baseline {baseline.quality.value:.4f}, limit {limit:.4f})"
        )
    point = outcome.point(batch_size)
    limit_ms = goals.latency_budget_ms
    if limit_ms is not None and point is not None and point.p99_ms > limit_ms:
        return (
            f"p99 {point.p99_ms:.2f} ms at batch {batch_size} is above the latency budget "
            f"of {limit_ms:g} ms"
        )
    if objective_value(outcome, goals, batch_size) is None:
        return f"no {goals.objective} figure at batch {batch_size}"
    return None


def decide(outcomes: Sequence[Outcome], goals: Goals) -> Decision:
    """``outcomes[0]`` is the baseline."""
    baseline = outcomes[0]
    batch_size = objective_batch(baseline, goals)
    reasons: dict[str, str] = {}
    base_value = objective_value(baseline, goals, batch_size)
    best: Outcome | None = None
    best_value = 0.0
    for outcome in outcomes[1:]:
        why = _disqualified(outcome, baseline, goals, batch_size)
        if why is not None:
            reasons[outcome.name] = why
            continue
        value = objective_value(outcome, goals, batch_size)
        assert value is not None  # _disqualified checked it
        if best is None or value > best_value:
            if best is not None:
                reasons[best.name] = f"qualified, but {outcome.name} did better"
            best, best_value = outcome, value
        else:
            reasons[outcome.name] = f"qualified, but {best.name} did better"
    if best is None or base_value is None or base_value <= 0:
        return Decision(baseline.name, True, reasons, 1.0, batch_size)
    gain = best_value / base_value
    if gain < 1.0 + goals.min_gain:
        reasons[best.name] = (
            f"the best that qualified, but only {gain:.2f}x the baseline's {goals.objective} "
            f"(needs {1.0 + goals.min_gain:.2f}x)"
        )
        return Decision(baseline.name, True, reasons, 1.0, batch_size)
    return Decision(best.name, False, reasons, gain, batch_size)
