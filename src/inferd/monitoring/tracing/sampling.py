"""Which requests are traced, as Triton decides it: every ``rate``-th request until ``count``
traces were taken, and every request whose caller sent a trace context, whatever the rate and
count (``rate=0`` then traces only those). Called on the event loop only."""

from __future__ import annotations

__all__ = ["TraceSampler"]


class TraceSampler:
    __slots__ = ("_left", "_rate", "_seen")

    def __init__(self, rate: int, count: int) -> None:
        if rate < 0 or count < -1:
            raise ValueError("rate must be >= 0 and count >= -1")
        self._rate = rate
        self._left = count  # -1: no limit
        self._seen = 0

    def decide(self, has_context: bool) -> bool:
        if has_context:
            return True
        if self._rate == 0 or self._left == 0:
            return False
        self._seen += 1
        if self._seen < self._rate:
            return False
        self._seen = 0
        if self._left > 0:
            self._left -= 1
        return True
