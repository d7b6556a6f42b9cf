"""One ready replica, one second at a time: a fluid queue in front of the capacity curve, and
the metrics the HPA can read from it.

Below the curve's peak a pod answers what it is offered with the curve's latency at that load.
Past the peak it answers ``max_rps`` per second; the rest waits in its queue (first in, first
out), and a request that would wait longer than the request timeout fails at once (inferd's
admission control refusing, or the client giving up). The second is cut into tenths so that a
queue building up or draining within it is followed.

The metrics, as inferd exposes them per pod:

- ``pending``: ``nv_inference_pending_request_count``, requests waiting to execute;
- ``queue-us``: the average queue time per request (``nv_inference_queue_duration_us`` over
  ``nv_inference_request_success``), in microseconds;
- ``cpu``: the pod's CPU use, which the HPA reads as a share of the pod's CPU request.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferd.errors import InvalidArgumentError
from inferd.tools.scaling.capacity import CapacityCurve, rate_at
from inferd.tools.scaling.hpa import MetricTarget
from inferd.tools.scaling.latency import LatencyModel

__all__ = ["METRICS", "ReplicaModel", "Second"]

METRICS = ("pending", "queue-us", "cpu")
SUBSTEPS = 10


@dataclass(frozen=True)
class Second:
    """What one pod did in one second."""

    served: float
    failed: float
    queued: float  # answered after waiting behind a full replica
    backlog: float  # requests still waiting at the end of the second
    pending: float
    queue_us: float
    cpu_cores: float


@dataclass(frozen=True)
class ReplicaModel:
    curve: CapacityCurve
    cpu_request_cores: float
    request_timeout_s: float

    def __post_init__(self) -> None:
        if self.cpu_request_cores <= 0:
            raise InvalidArgumentError("the pod's CPU request must be greater than 0")
        if self.request_timeout_s <= 0:
            raise InvalidArgumentError("the request timeout must be longer than 0")

    @property
    def max_rps(self) -> float:
        return self.curve.max_rps

    def cpu_cores(self, rps: float) -> float:
        """CPU use at this load: measured, or when the curve has none, the request's share
        the load is of the peak."""
        measured = self.curve.cpu_cores_at(rps)
        if measured is not None:
            return measured
        return min(rps, self.max_rps) / self.max_rps * self.cpu_request_cores

    def steady_value(self, metric: str, rps: float) -> float:
        """The metric (CPU as a utilisation percentage) of a pod carrying ``rps`` with an
        empty queue."""
        load = min(rps, self.max_rps)
        if metric == "pending":
            return self.curve.pending_at(load)
        if metric == "queue-us":
            return self.curve.queue_us_at(load)
        if metric == "cpu":
            return self.cpu_cores(load) / self.cpu_request_cores * 100
        raise InvalidArgumentError(f"unknown metric {metric!r}: use {', '.join(METRICS)}")

    def rate_at_target(self, metric: MetricTarget) -> float:
        """The per-pod load at which ``metric`` reaches its target (the peak, if it never
        does before the replica is full)."""
        return rate_at(self.curve, lambda r: self.steady_value(metric.name, r), metric.target)

    def reaches_target(self, metric: MetricTarget) -> bool:
        return self.steady_value(metric.name, self.max_rps) >= metric.target

    def step(self, backlog: float, offered: float, pods: int, latency: LatencyModel) -> Second:
        """One second of a pod offered ``offered`` requests with ``backlog`` waiting; latencies
        go to ``latency`` weighted for ``pods`` identical pods."""
        peak = self.max_rps
        if backlog <= 0 and offered <= peak:
            latency.served(offered, offered * pods)
            return Second(
                served=offered,
                failed=0.0,
                queued=0.0,
                backlog=0.0,
                pending=self.curve.pending_at(offered),
                queue_us=self.curve.queue_us_at(offered),
                cpu_cores=self.cpu_cores(offered),
            )
        dt = 1.0 / SUBSTEPS
        limit = peak * self.request_timeout_s  # the longest queue a request waits behind
        q = backlog
        served = failed = queued = accepted_total = wait_sum = q_sum = 0.0
        for _ in range(SUBSTEPS):
            arriving = offered * dt
            accepted = min(arriving, max(0.0, limit - q))
            failed += arriving - accepted
            if accepted > 0:
                wait_s = q / peak
                if q > 0:
                    latency.queued(wait_s * 1e6, accepted * pods)
                    queued += accepted
                else:
                    latency.served(min(offered, peak), accepted * pods)
                wait_sum += wait_s * accepted
                accepted_total += accepted
            q += accepted
            done = min(q, peak * dt)
            served += done
            q -= done
            q_sum += q
        load = min(served, peak)
        mean_wait_us = wait_sum / accepted_total * 1e6 if accepted_total else 0.0
        return Second(
            served=served,
            failed=failed,
            queued=queued,
            backlog=q,
            pending=self.curve.pending_at(load) + q_sum / SUBSTEPS,
            queue_us=self.curve.queue_us_at(load) + mean_wait_us,
            cpu_cores=self.cpu_cores(load),
        )
