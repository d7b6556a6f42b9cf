"""Statistics snapshots rendered as Triton renders them: JSON for HTTP, protobuf for gRPC."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonclient.grpc import service_pb2

from inferd.core.statistics import RESPONSE_PHASES, Duration, ResponseStat, StatsSnapshot

#: the durations of ``inference_stats``, in the order Triton lists them
INFER_PHASES = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)


def _d(d: Duration) -> dict[str, int]:
    return {"count": d.count, "ns": d.ns}


def _responses_json(stats: dict[int, ResponseStat]) -> dict[str, Any]:
    return {
        str(index): {p: _d(getattr(stat, p)) for p in RESPONSE_PHASES}
        for index, stat in stats.items()
    }


def to_json(snapshots: Sequence[StatsSnapshot]) -> dict[str, Any]:
    return {
        "model_stats": [
            {
                "name": s.name,
                "version": s.version,
                "last_inference": s.last_inference_ms,
                "inference_count": s.inference_count,
                "execution_count": s.execution_count,
                "inference_stats": {p: _d(getattr(s, p)) for p in INFER_PHASES},
                "response_stats": _responses_json(s.response_stats),
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": _d(b.compute_input),
                        "compute_infer": _d(b.compute_infer),
                        "compute_output": _d(b.compute_output),
                    }
                    for size, b in s.batch_stats.items()
                ],
                "memory_usage": [],
            }
            for s in snapshots
        ]
    }


def _pd(d: Duration) -> Any:
    return service_pb2.StatisticDuration(count=d.count, ns=d.ns)


def to_proto(snapshots: Sequence[StatsSnapshot]) -> Any:
    response = service_pb2.ModelStatisticsResponse()
    for s in snapshots:
        entry = response.model_stats.add(
            name=s.name,
            version=s.version,
            last_inference=s.last_inference_ms,
            inference_count=s.inference_count,
            execution_count=s.execution_count,
        )
        for phase in INFER_PHASES:
            getattr(entry.inference_stats, phase).CopyFrom(_pd(getattr(s, phase)))
        for index, stat in s.response_stats.items():
            into = entry.response_stats[str(index)]
            for phase in RESPONSE_PHASES:
                getattr(into, phase).CopyFrom(_pd(getattr(stat, phase)))
        for size, b in s.batch_stats.items():
            entry.batch_stats.add(
                batch_size=size,
                compute_input=_pd(b.compute_input),
                compute_infer=_pd(b.compute_infer),
                compute_output=_pd(b.compute_output),
            )
    return response
