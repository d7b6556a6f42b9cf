"""Statistics snapshots in Triton's shape: the values every layer reads (codecs, metrics, engine).

The counters that produce them live with the schedulers (``scheduling/stats.py``); a snapshot is
a plain copy that nothing updates.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

# request latency buckets in microseconds, for the latency histogram
LATENCY_BUCKETS_US: tuple[float, ...] = (
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
)
# batch-size histogram buckets (rows per execution)
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns


@dataclass(slots=True)
class BatchStat:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


#: The phases of :class:`ResponseStat`, in Triton's order.
RESPONSE_PHASES = ("compute_infer", "compute_output", "success", "fail", "empty_response", "cancel")


@dataclass(slots=True)
class ResponseStat:
    """The responses at one index within their requests (decoupled models): Triton's
    ``InferResponseStatistics``."""

    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    empty_response: Duration = field(default_factory=Duration)
    cancel: Duration = field(default_factory=Duration)

    def copy(self) -> ResponseStat:
        return ResponseStat(
            *(Duration(d.count, d.ns) for d in (getattr(self, n) for n in RESPONSE_PHASES))
        )


@dataclass(slots=True)
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int]
    total: float = 0.0

    @classmethod
    def with_bounds(cls, bounds: tuple[float, ...]) -> Histogram:
        return cls(bounds, [0] * (len(bounds) + 1))

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def copy(self) -> Histogram:
        return Histogram(self.bounds, list(self.counts), self.total)


@dataclass(slots=True)
class StatsSnapshot:
    name: str
    version: str
    last_inference_ms: int
    inference_count: int
    execution_count: int
    success: Duration
    fail: Duration
    queue: Duration
    compute_input: Duration
    compute_infer: Duration
    compute_output: Duration
    cache_hit: Duration
    cache_miss: Duration
    batch_stats: dict[int, BatchStat]
    failures: dict[str, int]  # by Triton reason
    rejections: dict[str, int]  # admission refusals by inferd reason
    batch_close_reasons: dict[str, int]  # why each batch was sent when it was
    pending: int
    latency_us: Histogram
    batch_rows: Histogram
    # sequence models only: active, backlogged, started, ended, released_idle
    sequences: dict[str, int] = field(default_factory=dict)
    response_cache: bool = False  # the version answers from the response cache
    # decoupled models: by the index of the response within its request
    response_stats: dict[int, ResponseStat] = field(default_factory=dict)
