"""Which variant answered a request, remembered for a while so a reward posted later
(``POST /v2/models/{m}/feedback``) is credited to it.

A bounded map: request id -> (variant, when it expires). Inserting past ``max_ids`` forgets the
oldest id; an id older than ``ttl_s`` is gone; a rewarded id is forgotten, so each request is
credited once. O(1) per request, on the event loop only.
"""

from __future__ import annotations

from collections import OrderedDict

from inferd.core.clock import Clock

__all__ = ["RoutedIds"]


class RoutedIds:
    def __init__(self, *, max_ids: int, ttl_s: float, clock: Clock) -> None:
        if max_ids < 1:
            raise ValueError("max_ids must be at least 1")
        self._max = max_ids
        self._ttl_ns = int(ttl_s * 1e9)
        self._clock = clock
        self._ids: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def remember(self, request_id: str, variant: str) -> None:
        now = self._clock.monotonic_ns()
        ids = self._ids
        if request_id in ids:
            del ids[request_id]
        ids[request_id] = (variant, now + self._ttl_ns)
        while len(ids) > self._max:
            ids.popitem(last=False)
        # forget a few expired ids from the old end, so memory follows the traffic of one ttl
        for _ in range(2):
            oldest = next(iter(ids.values()))
            if oldest[1] > now:
                break
            ids.popitem(last=False)

    def take(self, request_id: str) -> str | None:
        """The variant that answered ``request_id``, forgotten from here on; None when the id is
        unknown, expired or already taken."""
        found = self._ids.pop(request_id, None)
        if found is None or found[1] <= self._clock.monotonic_ns():
            return None
        return found[0]
