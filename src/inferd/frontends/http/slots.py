"""Who gets a connection when the HTTP server is at its connection limit: the policy, as data.

Below the limit every connection gets a slot of its own, and nothing here runs. At the limit a
new connection, in this order:

1. takes the slot of the connection that has been **idle the longest** — a keep-alive connection
   between requests, or one that has not sent a byte since it opened — which is closed (HTTP/1.1
   lets a server close an idle connection at any time; clients open a new one);
2. else, every slot being busy with a request, gets a **probe slot**: its first request is read
   with a short deadline and answered only if it is a health probe (:func:`is_health_probe`),
   then the connection closes; any other request gets ``503``;
3. else, the probe slots being full, takes the probe slot whose request has **waited the
   longest** without arriving;
4. else (every probe slot is answering a probe) gets ``503`` at once.

So a health or readiness probe is answered however the slots are held: by idle or silent
connections (step 1), by slow requests (steps 2 and 3), at a cost bounded by the limit plus the
probe slots. Finding the longest-idle connection scans the open connections; the scan's order is
kept (:class:`EvictionQueue`) and used up before the next scan, so a flood of connections costs
one scan per limit's worth of arrivals, not one per arrival.

When several processes serve the port (``inferd serve --frontends K``) the limit is theirs
together: the server is given a :class:`SharedCount`, a connection is counted there, and at
the limit the longest-idle connection of any of them makes room — this process keeps its idle
connections in :class:`IdleOrder` and publishes the oldest; another process's is closed by
that process on request. Probe slots stay per process.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from inferd.errors import InvalidArgumentError
from inferd.frontends.access import Api
from inferd.frontends.http.routes import match_route

T = TypeVar("T")
IdleKey = tuple[float, int]  # (idle since, the order the connection opened): ties in time are
# common, as event loops' clocks move in milliseconds

PROBE_SLOTS = 32  # connections over the limit that may wait for, and get, a health answer
PROBE_HEAD_TIMEOUT_S = 2.0  # a probe slot's request head must arrive within this (or less)
RESCAN_AFTER_NONE_IDLE_S = 0.05  # a scan that found no idle connection is not repeated sooner


class Admission(enum.Enum):
    OPEN = "open"  # below the limit: a slot of its own
    EVICT_IDLE = "evict_idle"  # the longest-idle connection is closed; this one takes its slot
    PROBE = "probe"  # a probe slot: answered only if its first request is a health probe
    EVICT_PROBE = "evict_probe"  # the longest-waiting probe slot is closed; this one takes it
    REFUSE = "refuse"  # 503 at once


def admit(
    open_connections: int,
    limit: int | None,
    *,
    idle: bool,
    probes: int,
    probes_waiting: int,
    probe_slots: int = PROBE_SLOTS,
) -> Admission:
    """What a new connection gets. ``open_connections`` counts the admitted connections (probe
    slots excluded); ``idle``: one of them is idle; ``probes``: probe slots in use, of which
    ``probes_waiting`` have not received their request head yet."""
    if limit is None or open_connections < limit:
        return Admission.OPEN
    if idle:
        return Admission.EVICT_IDLE
    if probes < probe_slots:
        return Admission.PROBE
    if probes_waiting > 0:
        return Admission.EVICT_PROBE
    return Admission.REFUSE


def is_health_probe(method: str, raw_path: str) -> bool:
    """A liveness, readiness or model readiness request (``--http-restricted-api`` group
    ``health``), the only requests answered on a probe slot."""
    if method not in ("GET", "HEAD"):
        return False
    try:
        route = match_route(raw_path, method)
    except InvalidArgumentError:
        return False
    return route is not None and route.api is Api.HEALTH


class EvictionQueue(Generic[T]):
    """Idle connections, longest idle first, as of the last scan of the open connections.

    ``idle_since(item)`` is the time an item became idle with a tie-break (:data:`IdleKey`),
    ``None`` while it is not idle. An item taken from the queue is still idle since the time it
    was queued with, or it is skipped: one that went busy and idle again since the scan became
    idle after every item still queued, as did every item that was not idle at the scan. So items
    come out longest-idle first. When the queue is used up the population is scanned again, but
    not within :data:`RESCAN_AFTER_NONE_IDLE_S` of a scan that found nothing idle.
    """

    def __init__(self, idle_since: Callable[[T], IdleKey | None]) -> None:
        self._idle_since = idle_since
        self._queue: list[tuple[IdleKey, T]] = []  # the longest idle last
        self._no_scan_before = float("-inf")

    def pop_longest_idle(self, population: Iterable[T], now: float) -> T | None:
        """The item idle the longest, removed from the queue; ``None`` if none is idle."""
        item = self._pop_valid()
        if item is not None or now < self._no_scan_before:
            return item
        idle_since = self._idle_since
        found = [(since, c) for c in population if (since := idle_since(c)) is not None]
        found.sort(key=lambda pair: pair[0], reverse=True)
        self._queue = found
        if not found:
            self._no_scan_before = now + RESCAN_AFTER_NONE_IDLE_S
        return self._pop_valid()

    def _pop_valid(self) -> T | None:
        queue = self._queue
        while queue:
            since, item = queue.pop()
            if self._idle_since(item) == since:
                return item
        return None


class SharedCount(Protocol):
    """The connection count of a port that several processes serve (``inferd serve
    --frontends K``, :mod:`inferd.server.frontends.connections`): one limit for all of them,
    and the longest-idle connection of any of them to make room at it. Idle times are the
    event loops' clock (``loop.time()``, the system's monotonic clock in every process)."""

    def take(self, limit: int) -> bool:
        """Count one more connection of this process if all of them hold fewer than
        ``limit``; False (nothing counted) at the limit."""
        ...

    def take_over(self) -> None:
        """Count one more connection past the limit (an idle one is being closed for it)."""
        ...

    def release(self) -> None:
        """One connection of this process closed."""
        ...

    def publish_idle(self, since: float | None) -> None:
        """Since when this process's longest-idle connection has been idle (None: none is)."""
        ...

    def oldest_elsewhere(self) -> tuple[float, int] | None:
        """The longest idle time another process published, and which process; None if none."""
        ...

    def ask_to_close_idle(self, holder: int) -> None:
        """Ask process ``holder`` to close its longest-idle connection."""
        ...

    def set_closer(self, close_idle: Callable[[], None]) -> None:
        """What to call when another process asks this one to close an idle connection."""
        ...


class IdleOrder(Generic[T]):
    """This process's idle connections in the order they became idle, for a port shared with
    other processes (:class:`SharedCount`): the longest idle is known at any moment in O(1)
    and published whenever it changes. Items become idle in time order (now, by one clock),
    so insertion order is idle order."""

    def __init__(self, publish: Callable[[float | None], None]) -> None:
        self._idle: dict[T, float] = {}
        self._publish = publish
        self._published: float | None = None

    def idle(self, item: T, since: float) -> None:
        idle = self._idle
        if item in idle:  # idle again without a request between: it moves to the end
            del idle[item]
            idle[item] = since
            self._refresh()
            return
        idle[item] = since
        if len(idle) == 1:  # the end is the head only when it is the sole item
            self._refresh()

    def busy(self, item: T) -> None:
        """``item`` is no longer idle (a request began, or it is closing)."""
        since = self._idle.pop(item, None)
        # only the head's leaving changes what is published (the head's time is published;
        # another item idle since the same time costs a look, no change)
        if since is not None and since == self._published:
            self._refresh()

    def oldest(self) -> tuple[float, T] | None:
        for item, since in self._idle.items():
            return since, item
        return None

    def _refresh(self) -> None:
        head = next(iter(self._idle.values()), None)
        if head != self._published:
            self._published = head
            self._publish(head)


__all__ = [
    "PROBE_HEAD_TIMEOUT_S",
    "PROBE_SLOTS",
    "Admission",
    "EvictionQueue",
    "IdleKey",
    "IdleOrder",
    "SharedCount",
    "admit",
    "is_health_probe",
]
