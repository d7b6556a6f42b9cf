"""From request records to figures: one measurement window, and one load point (pure).

A request belongs to the window in which its (final) response arrived, as in perf_analyzer.
Percentiles take the sorted latency at index ``round(p / 100 * (n - 1))``; a load point merges
the latencies of the windows it reports and divides their requests by their summed duration.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.tools.perf.llm_metrics import LlmFigures, LlmSample, llm_figures
from inferd.tools.perf.server_metrics import MetricsReading, ServerMetrics, aggregate
from inferd.tools.perf.server_split import ServerDelta, ServerSplit, split
from inferd.tools.perf.stability import STABILITY_WINDOWS, WindowFigures

REPORTED_PERCENTILES = (50, 90, 95, 99)


def percentile_index(count: int, percentile: float) -> int:
    """perf_analyzer's index of ``percentile`` in ``count`` sorted values."""
    return int(percentile / 100.0 * (count - 1) + 0.5)


def percentiles(sorted_ns: np.ndarray[Any, Any], wanted: Iterable[int]) -> dict[int, int]:
    """Latency at each wanted percentile (empty input: all zero)."""
    n = len(sorted_ns)
    return {p: int(sorted_ns[percentile_index(n, p)]) if n else 0 for p in sorted(set(wanted))}


@dataclass(frozen=True)
class Window:
    """What happened during one measurement window at one load point."""

    duration_ns: int
    latencies_ns: np.ndarray[Any, Any]  # of the requests answered in the window (int64)
    llm: tuple[LlmSample, ...] = ()  # openai transport: one per answered request
    errors: int = 0
    error_samples: tuple[str, ...] = ()
    sequences_ended: int = 0
    # open loop only: sends due in the window, how many left later than the bound, the worst
    sent: int = 0
    late: int = 0
    max_slip_ns: int = 0
    max_in_flight: int = 0
    client_cpu_s: float = 0.0  # CPU time this process used during the window
    server: ServerDelta | None = None
    server_cpu_s: float | None = None  # None: no source answered
    server_rss_bytes: int | None = None  # at the end of the window
    energy_j: float | None = None  # None: no readable power counters
    metrics: tuple[MetricsReading, ...] = ()  # --collect-metrics: the server's gauges read

    @property
    def count(self) -> int:
        return len(self.latencies_ns)

    def throughput(self, batch_size: int) -> float:
        if self.duration_ns <= 0:
            return 0.0
        return self.count * batch_size * 1e9 / self.duration_ns

    def figures(self, batch_size: int, percentile: int | None) -> WindowFigures:
        """The throughput and stabilising latency the stability rule compares."""
        if self.count == 0:
            return WindowFigures(0.0, 0.0)
        if percentile is None:
            latency = float(np.mean(self.latencies_ns))
        else:
            latency = float(np.sort(self.latencies_ns)[percentile_index(self.count, percentile)])
        return WindowFigures(self.throughput(batch_size), latency)


@dataclass(frozen=True)
class LoadPoint:
    """The reported figures of one load point (latencies in microseconds)."""

    mode: str  # "concurrency" | "request-rate" | "intervals"
    level: float  # the concurrency or the request rate (0 for an intervals file)
    batch_size: int
    stable: bool
    windows: int  # measurement windows taken
    request_count: int
    error_count: int
    duration_s: float
    throughput: float  # inferences per second (requests x batch size)
    avg_latency_us: float
    std_latency_us: float
    percentiles_us: dict[int, float]
    stabilising_percentile: int | None
    sequence_count: int = 0
    send_rate: float = 0.0  # open loop: sends per second actually made
    late_sends: int = 0
    sent: int = 0
    max_slip_us: float = 0.0
    max_in_flight: int = 0
    client_cpu_share: float = 0.0  # share of one core this process used while measuring
    server: ServerSplit | None = None
    errors: tuple[str, ...] = ()
    cost: dict[str, Any] = field(default_factory=dict)
    llm: LlmFigures | None = None  # openai transport: TTFT, ITL, tokens per second
    server_metrics: ServerMetrics | None = None  # --collect-metrics: GPU and host gauges

    @property
    def late_share(self) -> float:
        return self.late_sends / self.sent if self.sent else 0.0

    @property
    def level_label(self) -> str:
        if self.mode == "concurrency":
            return str(int(self.level))
        if self.mode == "request-rate":
            return f"{self.level:g}"
        return "intervals"


def merge(
    windows: Sequence[Window],
    *,
    mode: str,
    level: float,
    batch_size: int,
    stable: bool,
    percentile: int | None,
) -> LoadPoint:
    """The load point reported from its last (up to three) windows."""
    taken = list(windows[-STABILITY_WINDOWS:])
    if not taken:
        raise ValueError("a load point needs at least one window")
    latencies = np.sort(np.concatenate([w.latencies_ns for w in taken]).astype(np.int64))
    duration_ns = sum(w.duration_ns for w in taken)
    count = len(latencies)
    wanted = (*REPORTED_PERCENTILES, *((percentile,) if percentile is not None else ()))
    pct = percentiles(latencies, wanted)
    avg_ns = float(latencies.mean()) if count else 0.0
    std_ns = float(latencies.std()) if count else 0.0
    duration_s = duration_ns / 1e9
    sent = sum(w.sent for w in taken)
    server = _server_split(taken, avg_ns)
    inferences = count * batch_size
    samples: list[str] = []
    for w in windows:
        samples.extend(s for s in w.error_samples if s not in samples)
    metrics = aggregate([r for w in taken for r in w.metrics], duration_s)
    cost = _cost(taken, inferences)
    if metrics is not None and metrics.gpu_energy_j is not None and inferences:
        cost["gpu_energy_j"] = metrics.gpu_energy_j
        cost["gpu_energy_j_per_1000"] = metrics.gpu_energy_j * 1000 / inferences
    return LoadPoint(
        mode=mode,
        level=level,
        batch_size=batch_size,
        stable=stable,
        windows=len(windows),
        request_count=count,
        error_count=sum(w.errors for w in taken),
        duration_s=duration_s,
        throughput=count * batch_size / duration_s if duration_s > 0 else 0.0,
        avg_latency_us=avg_ns / 1000,
        std_latency_us=std_ns / 1000,
        percentiles_us={p: v / 1000 for p, v in pct.items()},
        stabilising_percentile=percentile,
        sequence_count=sum(w.sequences_ended for w in taken),
        send_rate=sent / duration_s if duration_s > 0 else 0.0,
        late_sends=sum(w.late for w in taken),
        sent=sent,
        max_slip_us=max(w.max_slip_ns for w in taken) / 1000,
        max_in_flight=max(w.max_in_flight for w in taken),
        client_cpu_share=sum(w.client_cpu_s for w in taken) / duration_s if duration_s else 0.0,
        server=server,
        errors=tuple(samples[:5]),
        cost=cost,
        llm=_llm(taken, duration_ns),
        server_metrics=metrics,
    )


def _llm(windows: Sequence[Window], duration_ns: int) -> LlmFigures | None:
    """The LLM figures of the windows' samples; None when they carry none."""
    samples = [s for w in windows for s in w.llm]
    return llm_figures(samples, duration_ns) if samples else None


def _server_split(windows: Sequence[Window], client_avg_ns: float) -> ServerSplit | None:
    total: ServerDelta | None = None
    for w in windows:
        if w.server is None:
            return None
        total = w.server if total is None else total + w.server
    return None if total is None else split(total, client_avg_ns)


def _sum_or_none(values: Iterable[float | None]) -> float | None:
    collected = list(values)
    if not collected or any(v is None for v in collected):
        return None
    return sum(v for v in collected if v is not None)


def _cost(windows: Sequence[Window], inferences: int) -> dict[str, Any]:
    cpu = _sum_or_none(w.server_cpu_s for w in windows)
    energy = _sum_or_none(w.energy_j for w in windows)
    rss = windows[-1].server_rss_bytes
    return {
        "server_cpu_s": cpu,
        "server_cpu_s_per_1000": (
            cpu * 1000 / inferences if cpu is not None and inferences else None
        ),
        "server_rss_mb": rss / 2**20 if rss is not None else None,
        "energy_j": energy,
        "energy_j_per_1000": (
            energy * 1000 / inferences if energy is not None and inferences else None
        ),
    }
