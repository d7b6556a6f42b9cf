"""The console's live figures: pure functions from two statistics snapshots to what changed.

The event stream (:mod:`.stream`) takes the engine's own ``statistics()`` snapshots on a timer
and hands consecutive pairs here; nothing on the serving path is touched. Rates are per second
over the window between two samples; latency percentiles come from the window's share of each
model's latency histogram (linear within a bucket, as Prometheus' ``histogram_quantile``).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferd.core.statistics import Duration, StatsSnapshot

__all__ = [
    "ProcessUsage",
    "Sample",
    "model_summary",
    "model_window",
    "percentile",
    "process_usage",
    "server_window",
]

Key = tuple[str, str]  # (model, version)


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    cpu_s: float  # user + system CPU time of the server process
    rss_bytes: int  # resident memory now


def process_usage() -> ProcessUsage:
    """The server process's CPU time and resident memory (``/proc`` on Linux; elsewhere the
    peak resident size the kernel reports)."""
    times = os.times()
    rss = 0
    try:
        with open("/proc/self/statm", "rb") as statm:
            rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        rss = int(usage.ru_maxrss) * 1024  # KiB on Linux; an upper bound elsewhere
    return ProcessUsage(times.user + times.system, rss)


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of the server: when (monotonic seconds), its process usage and every model
    version's snapshot."""

    t_s: float
    usage: ProcessUsage
    stats: Mapping[Key, StatsSnapshot]

    @classmethod
    def of(cls, t_s: float, usage: ProcessUsage, snapshots: Sequence[StatsSnapshot]) -> Sample:
        return cls(t_s, usage, {(s.name, s.version): s for s in snapshots})


def percentile(bounds: Sequence[float], counts: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a histogram with upper ``bounds`` and one more overflow
    count; ``None`` when it holds nothing. Linear within a bucket; the overflow bucket answers
    its lower bound."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(counts):
        if count and seen + count >= rank:
            if i >= len(bounds):
                return float(bounds[-1])
            low = float(bounds[i - 1]) if i > 0 else 0.0
            return low + (float(bounds[i]) - low) * max(0.0, rank - seen) / count
        seen += count
    return float(bounds[-1])


def _avg_us(cur: Duration, prev: Duration | None) -> float | None:
    count = cur.count - (prev.count if prev else 0)
    ns = cur.ns - (prev.ns if prev else 0)
    return ns / count / 1000.0 if count > 0 else None


def _delta(cur: int, prev: int | None) -> int:
    return max(0, cur - (prev or 0))


def model_summary(cur: StatsSnapshot) -> dict[str, Any]:
    """Since the version loaded: totals for the console's model page."""
    return {
        "inference_count": cur.inference_count,
        "execution_count": cur.execution_count,
        "success": cur.success.count,
        "fail": cur.fail.count,
        "failures": dict(cur.failures),
        "rejections": dict(cur.rejections),
        "cache_hits": cur.cache_hit.count,
        "cache_misses": cur.cache_miss.count,
        "response_cache": cur.response_cache,
        "batches": {
            str(size): b.compute_infer.count for size, b in sorted(cur.batch_stats.items())
        },
        "batch_close_reasons": dict(cur.batch_close_reasons),
        "pending": cur.pending,
    }


def model_window(
    prev: StatsSnapshot | None, cur: StatsSnapshot, dt_s: float, *, detail: bool = False
) -> dict[str, Any]:
    """What one model version did between two snapshots ``dt_s`` seconds apart (``prev`` None:
    the version just appeared, so its window starts empty)."""
    if prev is None:
        prev = cur
    dt = dt_s if dt_s > 0 else 1.0
    requests = _delta(cur.success.count, prev.success.count)
    fails = _delta(cur.fail.count, prev.fail.count)
    lat = [c - p for c, p in zip(cur.latency_us.counts, prev.latency_us.counts, strict=False)]
    out: dict[str, Any] = {
        "name": cur.name,
        "version": cur.version,
        "rps": round(requests / dt, 3),
        "errors_per_s": round(fails / dt, 3),
        "p50_us": percentile(cur.latency_us.bounds, lat, 0.50),
        "p99_us": percentile(cur.latency_us.bounds, lat, 0.99),
        "pending": cur.pending,
    }
    if detail:
        out["split_us"] = {
            "queue": _avg_us(cur.queue, prev.queue),
            "input": _avg_us(cur.compute_input, prev.compute_input),
            "infer": _avg_us(cur.compute_infer, prev.compute_infer),
            "output": _avg_us(cur.compute_output, prev.compute_output),
        }
        out["batches"] = {
            str(size): _delta(
                b.compute_infer.count,
                prev.batch_stats[size].compute_infer.count if size in prev.batch_stats else 0,
            )
            for size, b in sorted(cur.batch_stats.items())
        }
        out["cache_hits"] = _delta(cur.cache_hit.count, prev.cache_hit.count)
        out["totals"] = model_summary(cur)
    return out


def server_window(prev: Sample, cur: Sample, *, detail: str | None = None) -> dict[str, Any]:
    """The server's figures over the window between two samples: requests per second, CPU
    share of one core, resident memory, and each model version's window (in full for the
    model named by ``detail``)."""
    dt = cur.t_s - prev.t_s
    models = [
        model_window(prev.stats.get(key), snap, dt, detail=snap.name == detail)
        for key, snap in sorted(cur.stats.items())
    ]
    cpu = (cur.usage.cpu_s - prev.usage.cpu_s) / dt * 100.0 if dt > 0 else 0.0
    return {
        "window_s": round(dt, 3),
        "rps": round(sum(m["rps"] for m in models), 3),
        "cpu_percent": round(max(cpu, 0.0), 1),
        "rss_bytes": cur.usage.rss_bytes,
        "models": models,
    }
