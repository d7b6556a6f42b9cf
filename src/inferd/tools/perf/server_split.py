"""Where a request's time went on the server: deltas of the model's statistics (pure).

The statistics extension counts, per model, successful requests and the time they spent
queued and in compute (input, infer, output). Two snapshots taken around a window give the
window's counts; divided per request they split the client's latency as perf_analyzer does:
network + server overhead = client latency - (queue + compute), floored at zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

PHASES = ("success", "queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class ServerDelta:
    """Counts and nanoseconds added between two statistics snapshots."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    queue_count: int = 0
    queue_ns: int = 0
    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0

    def __add__(self, other: ServerDelta) -> ServerDelta:
        return ServerDelta(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


def _flat(stats: Mapping[str, Any]) -> dict[str, int]:
    inference = stats.get("inference_stats", {})
    out = {
        "inference_count": int(stats.get("inference_count", 0)),
        "execution_count": int(stats.get("execution_count", 0)),
    }
    for phase in PHASES:
        entry = inference.get(phase, {})
        out[f"{phase}_count"] = int(entry.get("count", 0))
        out[f"{phase}_ns"] = int(entry.get("ns", 0))
    return out


def delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> ServerDelta:
    """What the model's counters added from ``before`` to ``after`` (Triton's JSON shape).

    A counter that went down (the model was reloaded) counts from zero.
    """
    a, b = _flat(before), _flat(after)
    return ServerDelta(**{k: b[k] - a[k] if b[k] >= a[k] else b[k] for k in a})


@dataclass(frozen=True)
class ServerSplit:
    """Per request averages over the reported windows, in microseconds."""

    request_count: int
    inference_count: int
    execution_count: int
    request_us: float  # the server's own average request latency
    queue_us: float
    compute_input_us: float
    compute_infer_us: float
    compute_output_us: float
    network_us: float  # client latency not accounted for by the server's queue and compute

    @property
    def compute_us(self) -> float:
        return self.compute_input_us + self.compute_infer_us + self.compute_output_us

    @property
    def overhead_us(self) -> float:
        """Server time outside queue and compute (request handling, encoding...)."""
        return max(0.0, self.request_us - self.queue_us - self.compute_us)


def _per(ns: int, count: int) -> float:
    return ns / count / 1000 if count > 0 else 0.0


def split(d: ServerDelta, client_avg_latency_ns: float) -> ServerSplit:
    """The per-request split of ``d`` beside the client's average latency."""
    queue = _per(d.queue_ns, d.queue_count)
    c_in = _per(d.compute_input_ns, d.compute_input_count)
    c_infer = _per(d.compute_infer_ns, d.compute_infer_count)
    c_out = _per(d.compute_output_ns, d.compute_output_count)
    accounted = queue + c_in + c_infer + c_out
    return ServerSplit(
        request_count=d.success_count,
        inference_count=d.inference_count,
        execution_count=d.execution_count,
        request_us=_per(d.success_ns, d.success_count),
        queue_us=queue,
        compute_input_us=c_in,
        compute_infer_us=c_infer,
        compute_output_us=c_out,
        network_us=max(0.0, client_avg_latency_ns / 1000 - accounted),
    )
