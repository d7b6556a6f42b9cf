"""The HorizontalPodAutoscaler's rule (autoscaling/v2) as the Kubernetes controller applies it
on every sync, written as pure functions of the pods, their metric samples and the controller's
memory (recent recommendations and scale events).

One sync, in the controller's order:

1. Outside ``[minReplicas, maxReplicas]`` the count is brought back inside, nothing else.
2. Each metric proposes ``ceil(readyPods * currentValue / target)``, or keeps the count when the
   ratio is within the tolerance (0.1 by default). Pending pods and, for CPU, pods not ready (or
   whose sample covers time before they became ready, within the CPU initialization period) are
   set aside; pods without a sample are missing. With missing pods, or set-aside pods on the way
   up, the ratio is computed again conservatively (missing pods at the target on the way down
   and at 0 on the way up, set-aside pods at 0 on the way up); if that reverses the direction or
   falls within the tolerance, the count stays.
3. The largest proposal wins; when a metric fails and the others would scale down, nothing moves.
4. Stabilization: the count moves towards the proposal only as far as every recommendation of
   the window allows (the highest of the scale-down window, the lowest of the scale-up window).
5. Rate: each policy allows ``Pods`` or ``Percent`` changes per ``periodSeconds``, counted from
   the scale events still inside the period; ``selectPolicy`` takes the policy allowing the most
   change (Max), the least (Min), or none (Disabled).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from inferd.errors import InvalidArgumentError
from inferd.tools.scaling.hpa_behavior import (
    DEFAULT_BEHAVIOR,
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    Behavior,
    HpaState,
    ScalingPolicy,
    ScalingRules,
    limit_rate,
    stabilize,
    store_event,
)

__all__ = [
    "DEFAULT_BEHAVIOR",
    "DEFAULT_SCALE_DOWN",
    "DEFAULT_SCALE_UP",
    "Behavior",
    "ControllerSettings",
    "HpaSpec",
    "HpaState",
    "MetricSample",
    "MetricTarget",
    "PodView",
    "Proposal",
    "ScalingPolicy",
    "ScalingRules",
    "SyncResult",
    "metric_proposal",
    "stabilize",
    "sync",
]

PENDING, RUNNING, FAILED = "Pending", "Running", "Failed"


@dataclass(frozen=True)
class MetricTarget:
    """One entry of ``spec.metrics``: CPU as an average utilisation (percent of the pods' CPU
    requests), or a pods metric as an average value per pod."""

    name: str
    target: float
    cpu_utilization: bool = False

    def __post_init__(self) -> None:
        if self.target <= 0:
            raise InvalidArgumentError(f"the target of {self.name} must be greater than 0")
        if self.cpu_utilization and self.target != int(self.target):
            raise InvalidArgumentError("a CPU utilisation target is a whole percentage")


@dataclass(frozen=True)
class ControllerSettings:
    """kube-controller-manager's flags for every HPA."""

    tolerance: float = 0.1  # --horizontal-pod-autoscaler-tolerance
    cpu_initialization_period_s: float = (
        300.0  # --horizontal-pod-autoscaler-cpu-initialization-period
    )
    initial_readiness_delay_s: float = 30.0  # --horizontal-pod-autoscaler-initial-readiness-delay


@dataclass(frozen=True)
class HpaSpec:
    min_replicas: int
    max_replicas: int
    metrics: tuple[MetricTarget, ...]
    behavior: Behavior = DEFAULT_BEHAVIOR
    controller: ControllerSettings = field(default_factory=ControllerSettings)

    def __post_init__(self) -> None:
        if self.min_replicas < 1:
            raise InvalidArgumentError("minReplicas must be at least 1")
        if self.max_replicas < self.min_replicas:
            raise InvalidArgumentError(
                f"maxReplicas ({self.max_replicas}) is below minReplicas ({self.min_replicas})"
            )
        if not self.metrics:
            raise InvalidArgumentError("an HPA needs at least one metric")


@dataclass(frozen=True)
class MetricSample:
    """A pod's latest sample of one metric: CPU in cores, a pods metric in its own unit."""

    value: float
    timestamp_s: float
    window_s: float


@dataclass(frozen=True)
class PodView:
    """What the controller lists: ``count`` identical pods."""

    count: int = 1
    phase: str = RUNNING
    deleting: bool = False
    ready: bool = True
    start_s: float | None = 0.0  # status.startTime; None: not set yet
    ready_transition_s: float | None = 0.0  # the Ready condition's lastTransitionTime; None: none
    cpu_request: float = 1.0  # cores
    samples: Mapping[str, MetricSample] = field(default_factory=dict)


@dataclass(frozen=True)
class Proposal:
    """One metric's answer: the replicas it asks for, or why it has none."""

    replicas: int | None
    usage: float | None  # the average the HPA's status shows (percent for CPU)
    error: str = ""


@dataclass(frozen=True)
class _Tolerances:
    down: float
    up: float

    def within(self, ratio: float) -> bool:
        return (1.0 - self.down) <= ratio <= (1.0 + self.up)


def _milli(value: float) -> int:
    """A quantity's MilliValue (rounded up, as Kubernetes quantities are)."""
    return math.ceil(round(value * 1000, 6))


def _cpu_unready(pod: PodView, sample: MetricSample, now: float, cfg: ControllerSettings) -> bool:
    if pod.ready_transition_s is None or pod.start_s is None:
        return True
    if pod.start_s + cfg.cpu_initialization_period_s > now:
        # within the initialization period: not ready, or the sample reaches before readiness
        return not pod.ready or sample.timestamp_s < pod.ready_transition_s + sample.window_s
    # later: only a pod that has never been ready is set aside
    return not pod.ready and pod.start_s + cfg.initial_readiness_delay_s > pod.ready_transition_s


def _ratio(entries: Sequence[tuple[int, int, int]], metric: MetricTarget) -> tuple[float, float]:
    """``(usage ratio, usage)`` of ``(count, milli value, milli request)`` entries."""
    total = sum(n * v for n, v, _ in entries)
    if metric.cpu_utilization:
        requests = sum(n * r for n, _, r in entries)
        utilization = (total * 100) // requests if requests else 0
        return utilization / metric.target, float(utilization)
    pods = sum(n for n, _, _ in entries)
    usage = total // pods
    return usage / _milli(metric.target), usage / 1000


def metric_proposal(
    current: int,
    pods: Sequence[PodView],
    metric: MetricTarget,
    now: float,
    spec: HpaSpec,
) -> Proposal:
    """The replica count one metric asks for (the replica calculator of the controller)."""
    cfg = spec.controller
    tol = _Tolerances(
        _or(spec.behavior.scale_down.tolerance, cfg.tolerance),
        _or(spec.behavior.scale_up.tolerance, cfg.tolerance),
    )
    listed = [p for p in pods if p.count > 0]
    if not listed:
        return Proposal(None, None, "no pods returned by selector while calculating replica count")
    ready_count = 0
    unready: list[PodView] = []
    missing: list[PodView] = []
    entries: list[tuple[int, int, int]] = []
    for pod in listed:
        if pod.deleting or pod.phase == FAILED:
            continue
        if pod.phase == PENDING:
            unready.append(pod)
            continue
        sample = pod.samples.get(metric.name)
        if sample is None:
            missing.append(pod)
            continue
        if metric.cpu_utilization and _cpu_unready(pod, sample, now, cfg):
            unready.append(pod)
            continue
        ready_count += pod.count
        entries.append((pod.count, _milli(sample.value), _milli(pod.cpu_request)))
    if not entries:
        return Proposal(
            None, None, "did not receive metrics for targeted pods (pods might be unready)"
        )
    ratio, usage = _ratio(entries, metric)
    up_with_unready = bool(unready) and ratio > 1.0
    if not up_with_unready and not missing:
        if tol.within(ratio):
            return Proposal(current, usage)
        return Proposal(math.ceil(ratio * ready_count), usage)
    if missing and ratio != 1.0:
        for pod in missing:
            request = _milli(pod.cpu_request)
            if ratio < 1.0:  # on the way down, missing pods count as using the target
                if metric.cpu_utilization:
                    value = request * int(max(100.0, metric.target)) // 100
                else:
                    value = _milli(metric.target)
            else:  # on the way up, as using nothing
                value = 0
            entries.append((pod.count, value, request))
    if up_with_unready:
        entries += [(pod.count, 0, _milli(pod.cpu_request)) for pod in unready]
    new_ratio, _ = _ratio(entries, metric)
    if tol.within(new_ratio) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return Proposal(current, usage)
    counted = sum(n for n, _, _ in entries)
    replicas = math.ceil(new_ratio * counted)
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return Proposal(current, usage)
    return Proposal(replicas, usage)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


# -- one sync ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyncResult:
    state: HpaState
    desired: int  # the replicas the HPA sets (equal to the current count: no change)
    proposal: int | None  # the metrics' recommendation before stabilisation and rates
    usages: dict[str, float | None]
    reason: str


def sync(
    spec: HpaSpec, state: HpaState, current: int, pods: Sequence[PodView], now: float
) -> SyncResult:
    """One reconciliation of the HPA at time ``now`` (seconds) with ``current`` replicas set
    on the workload."""
    usages: dict[str, float | None] = {m.name: None for m in spec.metrics}
    proposal: int | None = None
    if current == 0:
        return SyncResult(
            state, 0, None, usages, "scaling is disabled (the workload has 0 replicas)"
        )
    if current > spec.max_replicas:
        desired, reason = spec.max_replicas, "above maxReplicas"
    elif current < spec.min_replicas:
        desired, reason = spec.min_replicas, "below minReplicas"
    else:
        proposals = [metric_proposal(current, pods, m, now, spec) for m in spec.metrics]
        usages = {m.name: p.usage for m, p in zip(spec.metrics, proposals, strict=True)}
        valid = [p.replicas for p in proposals if p.replicas is not None]
        errors = [p.error for p in proposals if p.replicas is None]
        best = max(valid, default=0)
        if errors and (len(errors) == len(proposals) or best < current):
            return SyncResult(state, current, None, usages, f"metrics unavailable: {errors[0]}")
        proposal = best
        stabilized, recommendations = stabilize(
            state.recommendations, best, current, now, spec.behavior
        )
        state = replace(state, recommendations=recommendations)
        desired, reason = limit_rate(
            stabilized, current, (spec.min_replicas, spec.max_replicas), spec.behavior, state, now
        )
    if desired > current:
        longest = spec.behavior.scale_up.longest_period_s
        state = replace(
            state, up_events=store_event(state.up_events, desired - current, now, longest)
        )
    elif desired < current:
        longest = spec.behavior.scale_down.longest_period_s
        state = replace(
            state, down_events=store_event(state.down_events, current - desired, now, longest)
        )
    return SyncResult(state, desired, proposal, usages, reason)
