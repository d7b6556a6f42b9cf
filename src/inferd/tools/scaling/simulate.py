"""The scaling simulation: traffic, pods and the HPA, one second at a time.

Every second: the HPA syncs (every ``sync_period_s``) on the samples the metrics pipeline last
scraped (every ``scrape_interval_s``, each the pod's average over ``window_s``); a scale-up
creates pods that stay Pending for ``start_s`` (scheduling, image pull, init containers), then
run without serving for ``warm_up_s`` (models loading and warming; inferd opens its ports, and
so its metrics, only once they are loaded) and then take traffic; a scale-down deletes the
newest pods first (as a ReplicaSet does), which stop taking traffic, finish their queue and go
after ``stop_s``. The traffic of the second is split evenly across ready pods, each one a
:class:`~inferd.tools.scaling.replica.ReplicaModel`; with no ready pod every request fails.

Pods created together behave alike, so they are simulated as one group with a count.
Deterministic: the same inputs give the same result.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.errors import InvalidArgumentError
from inferd.tools.scaling.hpa import (
    RUNNING,
    HpaSpec,
    HpaState,
    sync,
)
from inferd.tools.scaling.latency import BIN_EDGES_US, LatencyModel, percentile
from inferd.tools.scaling.pod_groups import PodGroup, merge_groups, remove_newest, scrape, view
from inferd.tools.scaling.replica import ReplicaModel

__all__ = ["MetricsPipeline", "PodTiming", "SimulationConfig", "SimulationResult", "simulate"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class PodTiming:
    start_s: float = 30.0  # created → containers running
    warm_up_s: float = 15.0  # running → ready (models loaded, readiness probe passed)
    stop_s: float = 10.0  # deleted → gone (preStop), besides finishing its queue
    warm_up_cpu: float = 1.0  # share of the CPU request used while loading

    def __post_init__(self) -> None:
        if min(self.start_s, self.warm_up_s, self.stop_s, self.warm_up_cpu) < 0:
            raise InvalidArgumentError("pod start, warm-up and stop times cannot be negative")


@dataclass(frozen=True)
class MetricsPipeline:
    sync_period_s: int = 15  # --horizontal-pod-autoscaler-sync-period
    scrape_interval_s: int = 15
    window_s: int = 60  # each sample averages the pod's last window

    def __post_init__(self) -> None:
        if min(self.sync_period_s, self.scrape_interval_s, self.window_s) < 1:
            raise InvalidArgumentError("sync period, scrape interval and window are 1 s or more")


@dataclass(frozen=True)
class SimulationConfig:
    hpa: HpaSpec
    replica: ReplicaModel
    timing: PodTiming = field(default_factory=PodTiming)
    pipeline: MetricsPipeline = field(default_factory=MetricsPipeline)
    initial_replicas: int | None = None  # None: what the HPA would hold at the first second
    report_interval_s: int = 60


@dataclass(frozen=True)
class Totals:
    offered: float
    served: float
    failed: float
    failed_no_pod: float  # offered while no pod was ready
    queued: float
    failed_scaling: float  # failed while some pod was starting
    queued_scaling: float
    pod_hours: float
    p50_us: float
    p99_us: float
    p999_us: float
    worst_p99_us: float  # the worst report interval's p99
    min_replicas: int
    max_replicas: int
    mean_replicas: float
    scale_ups: int
    scale_downs: int
    initial_replicas: int
    left_in_queues: float


@dataclass(frozen=True)
class SimulationResult:
    """Per report interval series (``t_s`` is each interval's start) and the totals."""

    t_s: Array
    offered_rps: Array
    replicas: Array  # spec.replicas at the interval's end
    ready: Array  # ready pods, averaged over the interval
    pods: Array  # billed pods (any phase), averaged
    p50_us: Array
    p99_us: Array
    failed: Array
    queued: Array
    usages: dict[str, Array]  # what the HPA saw at its last sync in the interval
    totals: Totals
    histogram: Array  # every answered request's latency (latency.BIN_EDGES_US)


def initial_replicas(spec: HpaSpec, replica: ReplicaModel, first_rps: float) -> int:
    """The pods that carry ``first_rps`` with every metric at or below its target."""
    per_pod = min(replica.rate_at_target(m) for m in spec.metrics)
    needed = math.ceil(first_rps / per_pod) if per_pod > 0 else spec.max_replicas
    return min(max(needed, spec.min_replicas), spec.max_replicas)


class _Run:
    """The state of one simulation while it runs."""

    def __init__(self, config: SimulationConfig, first: int, duration: int) -> None:
        self.cfg = config
        self.metric_names = tuple(m.name for m in config.hpa.metrics)
        self.latency = LatencyModel(config.replica.curve)
        pipe = config.pipeline
        self.keep = pipe.window_s + pipe.scrape_interval_s + 2
        long_ago = -(config.hpa.controller.cpu_initialization_period_s + pipe.window_s + 1)
        self.groups = [PodGroup(first, long_ago, long_ago, long_ago, deque(maxlen=self.keep))]
        self.leaving: list[PodGroup] = []
        self.state = HpaState()
        self.replicas = first
        self.usage_now: dict[str, float | None] = dict.fromkeys(self.metric_names)
        self.ups = self.downs = 0
        self.seen = [first, first]
        n = math.ceil(duration / config.report_interval_s)
        self.columns: dict[str, list[float]] = {
            k: [0.0] * n for k in ("offered", "ready", "pods", "failed", "queued", "replicas")
        }
        self.p50 = [math.nan] * n
        self.p99 = [math.nan] * n
        self.usages = {name: [math.nan] * n for name in self.metric_names}
        self.overall = np.zeros(len(BIN_EDGES_US) - 1)
        self.sums = dict.fromkeys(
            ("served", "failed", "no_pod", "queued", "failed_scaling", "queued_scaling"), 0.0
        )
        self.pod_s = self.replica_s = 0.0

    def scrape(self, t: int) -> None:
        for g in self.groups:
            if g.phase(t) == RUNNING:
                scrape(g, t, self.cfg.pipeline.window_s, self.metric_names)

    def sync(self, t: int) -> None:
        cfg = self.cfg
        request = cfg.replica.cpu_request_cores
        pods = [view(g, t, request) for g in (*self.groups, *self.leaving)]
        result = sync(cfg.hpa, self.state, self.replicas, pods, float(t))
        self.state = result.state
        self.usage_now = result.usages
        if result.desired > self.replicas:
            self.ups += 1
            running = t + cfg.timing.start_s
            self.groups.append(
                PodGroup(
                    result.desired - self.replicas,
                    t,
                    running,
                    running + cfg.timing.warm_up_s,
                    deque(maxlen=self.keep),
                )
            )
        elif result.desired < self.replicas:
            self.downs += 1
            remove_newest(self.groups, self.leaving, self.replicas - result.desired, t)
        self.replicas = result.desired
        self.groups = merge_groups(
            self.groups, t, cfg.hpa.controller.cpu_initialization_period_s, cfg.pipeline.window_s
        )

    def second(self, t: int, rps: float) -> None:
        cfg, replica = self.cfg, self.cfg.replica
        ready = [g for g in self.groups if g.is_ready(t)]
        n_ready = sum(g.count for g in ready)
        failed = queued = 0.0
        if n_ready == 0:
            failed = rps
            self.sums["no_pod"] += rps
        else:
            per_pod = rps / n_ready
            for g in ready:
                s = replica.step(g.backlog, per_pod, g.count, self.latency)
                g.backlog = s.backlog
                self.sums["served"] += s.served * g.count
                failed += s.failed * g.count
                queued += s.queued * g.count
                g.history.append((t, s.pending, s.queue_us, s.cpu_cores))
        loading_cpu = cfg.timing.warm_up_cpu * replica.cpu_request_cores
        scaling = False
        for g in self.groups:
            if not g.is_ready(t):
                scaling = True
                if g.phase(t) == RUNNING:
                    g.history.append((t, None, None, loading_cpu))
        for g in self.leaving:
            done = min(g.backlog, replica.max_rps)
            self.sums["served"] += done * g.count
            g.backlog -= done
        billed = sum(g.count for g in self.groups) + sum(g.count for g in self.leaving)
        stop_s = cfg.timing.stop_s
        self.leaving = [
            g for g in self.leaving if g.backlog > 0 or t + 1 < (g.deleted_s or 0.0) + stop_s
        ]
        self._record(t, rps, n_ready, billed, failed, queued, scaling)

    def _record(
        self,
        t: int,
        rps: float,
        n_ready: int,
        billed: int,
        failed: float,
        queued: float,
        scaling: bool,
    ) -> None:
        sums = self.sums
        sums["failed"] += failed
        sums["queued"] += queued
        if scaling:
            sums["failed_scaling"] += failed
            sums["queued_scaling"] += queued
        self.pod_s += billed
        self.replica_s += self.replicas
        self.seen = [min(self.seen[0], self.replicas), max(self.seen[1], self.replicas)]
        i = t // self.cfg.report_interval_s
        col = self.columns
        col["offered"][i] += rps
        col["ready"][i] += n_ready
        col["pods"][i] += billed
        col["failed"][i] += failed
        col["queued"][i] += queued
        col["replicas"][i] = self.replicas
        for name, value in self.usage_now.items():
            if value is not None:
                self.usages[name][i] = value

    def close_interval(self, i: int) -> None:
        hist = self.latency.take()
        self.overall += hist
        self.p50[i], self.p99[i] = percentile(hist, 50), percentile(hist, 99)

    def result(self, offered: Array, first: int) -> SimulationResult:
        duration, step = len(offered), self.cfg.report_interval_s
        n = len(self.p50)
        lengths = np.full(n, float(step))
        lengths[-1] = duration - (n - 1) * step
        p99 = np.array(self.p99)
        sums = self.sums
        totals = Totals(
            offered=float(np.sum(offered)),
            served=sums["served"],
            failed=sums["failed"],
            failed_no_pod=sums["no_pod"],
            queued=sums["queued"],
            failed_scaling=sums["failed_scaling"],
            queued_scaling=sums["queued_scaling"],
            pod_hours=self.pod_s / 3600,
            p50_us=percentile(self.overall, 50),
            p99_us=percentile(self.overall, 99),
            p999_us=percentile(self.overall, 99.9),
            worst_p99_us=float(np.nanmax(p99)) if np.any(np.isfinite(p99)) else math.nan,
            min_replicas=self.seen[0],
            max_replicas=self.seen[1],
            mean_replicas=self.replica_s / duration,
            scale_ups=self.ups,
            scale_downs=self.downs,
            initial_replicas=first,
            left_in_queues=sum(g.backlog * g.count for g in (*self.groups, *self.leaving)),
        )
        col = {k: np.array(v) for k, v in self.columns.items()}
        return SimulationResult(
            t_s=np.arange(n) * float(step),
            offered_rps=col["offered"] / lengths,
            replicas=col["replicas"],
            ready=col["ready"] / lengths,
            pods=col["pods"] / lengths,
            p50_us=np.array(self.p50),
            p99_us=p99,
            failed=col["failed"],
            queued=col["queued"],
            usages={k: np.array(v) for k, v in self.usages.items()},
            totals=totals,
            histogram=self.overall,
        )


def simulate(config: SimulationConfig, offered: Array) -> SimulationResult:
    """Run the HPA over ``offered`` (requests per second, one value per second)."""
    duration = len(offered)
    if duration < 1:
        raise InvalidArgumentError("the simulation needs at least one second of traffic")
    if config.report_interval_s < 1:
        raise InvalidArgumentError("the report interval must be 1 s or more")
    first = config.initial_replicas
    if first is None:
        first = initial_replicas(config.hpa, config.replica, float(offered[0]))
    if first < 1:
        raise InvalidArgumentError("the simulation starts with at least one replica")
    run = _Run(config, first, duration)
    pipe, step = config.pipeline, config.report_interval_s
    for t, rps in enumerate(offered.tolist()):
        if t > 0 and t % pipe.scrape_interval_s == 0:
            run.scrape(t)
        if t > 0 and t % pipe.sync_period_s == 0:
            run.sync(t)
        run.second(t, rps)
        if t + 1 == duration or (t + 1) % step == 0:
            run.close_interval(t // step)
    return run.result(offered, first)
