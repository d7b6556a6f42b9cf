"""perf_analyzer's stability rule over measurement windows (pure).

A load point is stable when the last :data:`STABILITY_WINDOWS` windows each completed requests
and, among them, the largest throughput is within ``ratio`` (1 + stability-percentage / 100) of
the smallest, and likewise the largest stabilising latency (the average, or the chosen
percentile) of the smallest. Measurement stops at the first stable point or after max-trials
windows; the reported figures merge the last three windows either way (marked unstable in the
second case).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

STABILITY_WINDOWS = 3


@dataclass(frozen=True)
class WindowFigures:
    """What the rule reads of one window."""

    throughput: float  # inferences per second
    latency_ns: float  # the stabilising latency: average or the chosen percentile


def _within(values: Sequence[float], ratio: float) -> bool:
    low, high = min(values), max(values)
    return low > 0 and high / low <= ratio


def is_stable(
    windows: Sequence[WindowFigures], ratio: float, *, check_latency: bool = True
) -> bool:
    """Whether the last three windows satisfy perf_analyzer's rule at ``ratio`` (e.g. 1.1)."""
    if len(windows) < STABILITY_WINDOWS:
        return False
    last = windows[-STABILITY_WINDOWS:]
    if any(w.throughput <= 0 for w in last):
        return False
    if not _within([w.throughput for w in last], ratio):
        return False
    return not check_latency or _within([w.latency_ns for w in last], ratio)


def should_stop(windows: Sequence[WindowFigures], ratio: float, max_trials: int) -> bool:
    """Stop measuring this load point: stable, or ``max_trials`` windows taken."""
    return is_stable(windows, ratio) or len(windows) >= max_trials
