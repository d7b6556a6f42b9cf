"""One plan: the same traffic simulated for each minReplicas asked for (the warm spares kept
through the quiet hours), beside a fixed fleet sized for the peak at the target."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from inferd.errors import InvalidArgumentError
from inferd.tools.scaling.hpa import MetricTarget
from inferd.tools.scaling.replica import ReplicaModel
from inferd.tools.scaling.simulate import SimulationConfig, SimulationResult, simulate

__all__ = ["Plan", "PlanRun", "run_plan"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class PlanRun:
    label: str
    min_replicas: int
    max_replicas: int
    autoscaled: bool
    result: SimulationResult


@dataclass(frozen=True)
class Plan:
    runs: tuple[PlanRun, ...]
    per_pod_rps: dict[str, float | None]  # each metric's target as requests/s per pod (None:
    # one pod never reaches it)
    peak_rps: float
    mean_rps: float
    duration_s: int
    warnings: tuple[str, ...]


def _unreached(replica: ReplicaModel, metric: MetricTarget) -> str:
    at_peak = replica.steady_value(metric.name, replica.max_rps)
    what = (
        "it never asks for more pods"
        if metric.cpu_utilization
        else "it asks for more pods only once requests queue beyond the peak"
    )
    return (
        f"one replica never reaches {metric.name}={metric.target:g} ({at_peak:.3g} at its peak "
        f"of {replica.max_rps:,.0f} req/s): {what}"
    )


def run_plan(
    config: SimulationConfig,
    offered: Array,
    min_values: Sequence[int],
    *,
    fixed_fleet: bool = True,
) -> Plan:
    """Simulate ``offered`` once per minReplicas in ``min_values`` and, with ``fixed_fleet``,
    once more with as many pods as the peak needs at the target and no autoscaling."""
    hpa, replica = config.hpa, config.replica
    if not min_values:
        raise InvalidArgumentError("give at least one minReplicas to simulate")
    for value in min_values:
        if not 1 <= value <= hpa.max_replicas:
            raise InvalidArgumentError(
                f"minReplicas {value} is outside 1..maxReplicas ({hpa.max_replicas})"
            )
    per_pod = {
        m.name: replica.rate_at_target(m) if replica.reaches_target(m) else None
        for m in hpa.metrics
    }
    warnings = [_unreached(replica, m) for m in hpa.metrics if not replica.reaches_target(m)]
    peak = float(np.max(offered)) if len(offered) else 0.0
    runs = []
    for value in min_values:
        cfg = replace(config, hpa=replace(hpa, min_replicas=value))
        runs.append(
            PlanRun(f"minReplicas {value}", value, hpa.max_replicas, True, simulate(cfg, offered))
        )
    if fixed_fleet:
        per = min(replica.rate_at_target(m) for m in hpa.metrics)
        fleet = max(1, math.ceil(peak / per)) if per > 0 else hpa.max_replicas
        cfg = replace(
            config,
            hpa=replace(hpa, min_replicas=fleet, max_replicas=fleet),
            initial_replicas=fleet,
        )
        runs.append(
            PlanRun(f"fixed {fleet} (peak at target)", fleet, fleet, False, simulate(cfg, offered))
        )
    return Plan(
        runs=tuple(runs),
        per_pod_rps=per_pod,
        peak_rps=peak,
        mean_rps=float(np.mean(offered)) if len(offered) else 0.0,
        duration_s=len(offered),
        warnings=tuple(warnings),
    )
