"""A bounded window of recent latencies, for one variant's p50 and p99.

The window holds the last ``capacity`` latencies in a ring (a preallocated Python list: adding
is one store and one increment, and memory never grows with the traffic); percentiles are
computed when read, with numpy's default (linear) interpolation over what the ring holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LatencySummary", "LatencyWindow"]


@dataclass(frozen=True, slots=True)
class LatencySummary:
    samples: int  # latencies the figures are computed from (at most the capacity)
    p50_s: float | None  # None while the window is empty
    p99_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "p50_s": self.p50_s, "p99_s": self.p99_s}


class LatencyWindow:
    """The last ``capacity`` latencies, in seconds."""

    __slots__ = ("_next", "_values", "filled", "total")

    def __init__(self, capacity: int = 2048) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self._values = [0.0] * capacity
        self._next = 0
        self.filled = 0  # latencies held
        self.total = 0  # latencies ever added

    @property
    def capacity(self) -> int:
        return len(self._values)

    def add(self, latency_s: float) -> None:
        """Record one latency, replacing the oldest once the ring is full (O(1))."""
        i = self._next
        self._values[i] = latency_s
        i += 1
        self._next = 0 if i == len(self._values) else i
        self.total += 1
        if self.filled < len(self._values):
            self.filled += 1

    def clear(self) -> None:
        self._next = 0
        self.filled = 0
        self.total = 0

    def values(self) -> np.ndarray[Any, np.dtype[np.float64]]:
        """The latencies held, in no particular order (a copy)."""
        return np.array(self._values[: self.filled], dtype=np.float64)

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile (0-100) of the latencies held; None when there are none."""
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"a percentile must lie in [0, 100], not {q}")
        if not self.filled:
            return None
        return float(np.percentile(self.values(), q))

    def summary(self) -> LatencySummary:
        if not self.filled:
            return LatencySummary(0, None, None)
        p50, p99 = np.percentile(self.values(), [50.0, 99.0])
        return LatencySummary(self.filled, float(p50), float(p99))
