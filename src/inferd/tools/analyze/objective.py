"""What a measured configuration is worth: figures per load point, the user's goals, the verdict
on each constraint, the objective value, and the Pareto front (pure).

A configuration is measured at several load points (client concurrencies). Its objective:

- ``throughput``: the highest throughput among its load points whose latency (at the chosen
  percentile) is within the budget — every load point when there is no budget;
- ``latency``: the lowest latency among its load points that reach ``min_throughput`` — every
  load point when there is no minimum.

A configuration is *feasible* when it loaded and answered, some load point meets the latency
budget, its best throughput reaches the minimum, and its memory is within the limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from inferd.errors import InvalidArgumentError
from inferd.tools.analyze.space import Candidate

__all__ = [
    "PERCENTILES",
    "Check",
    "Goals",
    "Measurement",
    "Outcome",
    "PointFigures",
    "Verdict",
    "evaluate",
    "judge",
    "pareto_front",
]

PERCENTILES = ("avg", "p50", "p90", "p95", "p99")
Objective = Literal["throughput", "latency"]


@dataclass(frozen=True)
class PointFigures:
    """One load point: throughput in inferences/s, latencies in microseconds."""

    concurrency: int
    throughput: float
    latency_us: dict[str, float]  # keys: PERCENTILES
    stable: bool = True
    errors: int = 0

    def latency(self, percentile: str) -> float:
        return self.latency_us[percentile]

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "throughput": self.throughput,
            "latency_us": dict(self.latency_us),
            "stable": self.stable,
            "errors": self.errors,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PointFigures:
        return cls(
            concurrency=int(data["concurrency"]),
            throughput=float(data["throughput"]),
            latency_us={str(k): float(v) for k, v in data["latency_us"].items()},
            stable=bool(data.get("stable", True)),
            errors=int(data.get("errors", 0)),
        )


@dataclass(frozen=True)
class Measurement:
    """One configuration of one model, measured (or failed: ``error`` says why)."""

    model: str
    key: str  # "default" for the model's own config, else the candidate's key
    candidate: Candidate
    points: tuple[PointFigures, ...]
    memory_mb: float | None = None
    error: str | None = None
    # 0: the first measurement of this config; 1, 2 ...: the confirmation rounds. A combined
    # measurement (repeats.combine) holds the last round's number.
    repeat: int = 0

    @property
    def runs(self) -> int:
        return self.repeat + 1

    @property
    def is_default(self) -> bool:
        return self.key == "default"

    @property
    def label(self) -> str:
        return "default" if self.is_default else self.key

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "key": self.key,
            "candidate": self.candidate.to_dict(),
            "points": [p.to_dict() for p in self.points],
            "memory_mb": self.memory_mb,
            "error": self.error,
            "repeat": self.repeat,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        memory = data.get("memory_mb")
        return cls(
            model=str(data["model"]),
            key=str(data["key"]),
            candidate=Candidate.from_dict(data["candidate"]),
            points=tuple(PointFigures.from_dict(p) for p in data.get("points", ())),
            memory_mb=None if memory is None else float(memory),
            error=data.get("error"),
            repeat=int(data.get("repeat", 0)),
        )


@dataclass(frozen=True)
class Goals:
    """The objective and the constraints, as the user gave them."""

    objective: Objective = "throughput"
    percentile: str = "p99"
    latency_budget_ms: float | None = None
    min_throughput: float | None = None
    max_memory_mb: float | None = None

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise InvalidArgumentError(
                f"percentile must be one of {', '.join(PERCENTILES)}, got '{self.percentile}'"
            )

    @property
    def maximise(self) -> bool:
        return self.objective == "throughput"

    @property
    def unit(self) -> str:
        return "infer/s" if self.maximise else "ms"


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Verdict:
    feasible: bool
    value: float | None  # the objective (inferences/s or ms); None when nothing qualifies
    point: PointFigures | None  # the load point that gives the value
    checks: tuple[Check, ...]

    def score(self, goals: Goals) -> float:
        """A number to maximise: the objective when feasible, the worst possible otherwise."""
        if not self.feasible or self.value is None:
            return float("-inf")
        return self.value if goals.maximise else -self.value


def evaluate(measurement: Measurement, goals: Goals) -> Verdict:
    """The verdict on one measured configuration."""
    if measurement.error is not None or not measurement.points:
        reason = measurement.error or "no load point was measured"
        return Verdict(False, None, None, (Check("loads and answers", False, reason),))
    pct = goals.percentile
    points = measurement.points
    budget_us = None if goals.latency_budget_ms is None else goals.latency_budget_ms * 1000.0
    best: PointFigures | None
    if goals.maximise:
        qualifying = [p for p in points if budget_us is None or p.latency(pct) <= budget_us]
        best = max(qualifying, key=lambda p: p.throughput, default=None)
        value = None if best is None else best.throughput
    else:
        qualifying = [
            p
            for p in points
            if goals.min_throughput is None or p.throughput >= goals.min_throughput
        ]
        best = min(qualifying, key=lambda p: p.latency(pct), default=None)
        value = None if best is None else best.latency(pct) / 1000.0
    checks: list[Check] = []
    if budget_us is not None:
        latency = (best or min(points, key=lambda p: p.latency(pct))).latency(pct)
        checks.append(
            Check(
                f"{pct} latency ≤ {goals.latency_budget_ms:g} ms",
                best is not None and latency <= budget_us,
                f"{latency / 1000.0:.3f} ms",
            )
        )
    if goals.min_throughput is not None:
        throughput = (best or max(points, key=lambda p: p.throughput)).throughput
        checks.append(
            Check(
                f"throughput ≥ {goals.min_throughput:g} infer/s",
                best is not None and throughput >= goals.min_throughput,
                f"{throughput:.1f} infer/s",
            )
        )
    if goals.max_memory_mb is not None:
        memory = measurement.memory_mb
        checks.append(
            Check(
                f"memory ≤ {goals.max_memory_mb:g} MB",
                memory is not None and memory <= goals.max_memory_mb,
                "not measured" if memory is None else f"{memory:.1f} MB",
            )
        )
    feasible = best is not None and all(c.passed for c in checks)
    return Verdict(feasible, value, best, tuple(checks))


def pareto_front(pairs: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (latency, throughput) pairs no other pair beats: none has lower or equal
    latency and higher or equal throughput with at least one strictly better. Sorted by
    latency."""
    order = sorted(range(len(pairs)), key=lambda i: (pairs[i][0], -pairs[i][1]))
    front: list[int] = []
    best_throughput = float("-inf")
    for index in order:
        throughput = pairs[index][1]
        if throughput > best_throughput:
            front.append(index)
            best_throughput = throughput
    return front


@dataclass(frozen=True)
class Outcome:
    """One model's measured configurations judged against the goals."""

    model: str
    goals: Goals
    measurements: tuple[Measurement, ...]
    verdicts: dict[str, Verdict]  # by measurement key
    default: Measurement | None
    best: Measurement | None  # the best feasible one (may be the default); None if none is

    def verdict(self, measurement: Measurement) -> Verdict:
        return self.verdicts[measurement.key]

    @property
    def best_matches_default(self) -> bool:
        """The best config is another measurement of the default's settings: its margin is
        measurement noise, not a gain."""
        best, default = self.best, self.default
        return (
            best is not None
            and default is not None
            and not best.is_default
            and best.candidate == default.candidate
        )

    def margin(self) -> float | None:
        """How much better the best is than the default, as a fraction (0.25: 25% better):
        more throughput, or less latency. None when either has no value."""
        if self.best is None or self.default is None:
            return None
        best = self.verdicts[self.best.key].value
        default = self.verdicts[self.default.key].value
        if best is None or default is None or default <= 0 or best <= 0:
            return None
        return best / default - 1.0 if self.goals.maximise else default / best - 1.0


def judge(
    model: str,
    measurements: Sequence[Measurement],
    goals: Goals,
    *,
    confirmed_only: bool = False,
) -> Outcome:
    """Verdicts for every measurement of ``model`` and the best feasible one.

    With ``confirmed_only`` the best is taken among the configurations measured more than once
    (the confirmation round) when any of them is feasible. Ties go to the configuration
    measured first (the default is measured first of all).
    """
    mine = tuple(m for m in measurements if m.model == model)
    verdicts = {m.key: evaluate(m, goals) for m in mine}
    pool = mine
    if confirmed_only:
        confirmed = tuple(m for m in mine if m.runs > 1 and verdicts[m.key].feasible)
        pool = confirmed or mine
    best: Measurement | None = None
    best_score = float("-inf")
    for m in pool:
        verdict = verdicts[m.key]
        if verdict.feasible and verdict.score(goals) > best_score:
            best, best_score = m, verdict.score(goals)
    default = next((m for m in mine if m.is_default), None)
    return Outcome(model, goals, mine, verdicts, default, best)
