"""The HTTP connection-slot policy (``frontends/http/slots.py``) as pure functions and data."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.frontends.http.slots import (
    PROBE_SLOTS,
    RESCAN_AFTER_NONE_IDLE_S,
    Admission,
    EvictionQueue,
    admit,
    is_health_probe,
)


@pytest.mark.parametrize(
    ("open_connections", "limit", "idle", "probes", "waiting", "expected"),
    [
        (0, None, False, 0, 0, Admission.OPEN),
        (10_000, None, False, 0, 0, Admission.OPEN),
        (63, 64, False, 0, 0, Admission.OPEN),
        (64, 64, True, 0, 0, Admission.EVICT_IDLE),
        (64, 64, True, PROBE_SLOTS, 0, Admission.EVICT_IDLE),  # idle slots before probe slots
        (64, 64, False, 0, 0, Admission.PROBE),
        (64, 64, False, PROBE_SLOTS - 1, PROBE_SLOTS - 1, Admission.PROBE),
        (64, 64, False, PROBE_SLOTS, 1, Admission.EVICT_PROBE),
        (64, 64, False, PROBE_SLOTS, 0, Admission.REFUSE),
        (65, 64, False, PROBE_SLOTS, 0, Admission.REFUSE),
    ],
)
def test_admission_at_and_below_the_limit(
    open_connections: int,
    limit: int | None,
    idle: bool,
    probes: int,
    waiting: int,
    expected: Admission,
) -> None:
    decision = admit(open_connections, limit, idle=idle, probes=probes, probes_waiting=waiting)
    assert decision is expected


def test_no_probe_slots_means_refusal_when_nothing_is_idle() -> None:
    assert admit(2, 2, idle=False, probes=0, probes_waiting=0, probe_slots=0) is Admission.REFUSE


@pytest.mark.parametrize(
    ("method", "path", "probe"),
    [
        ("GET", "/v2/health/live", True),
        ("GET", "/v2/health/ready", True),
        ("HEAD", "/v2/health/ready", True),
        ("GET", "/v2/models/simple/ready", True),
        ("GET", "/v2/models/simple/versions/3/ready", True),
        ("GET", "/v2/models/caf%C3%A9/ready", True),
        ("POST", "/v2/health/live", False),
        ("GET", "/v2/models/simple", False),
        ("POST", "/v2/models/simple/infer", False),
        ("GET", "/v2/health/live/", False),
        ("GET", "/v2", False),
        ("GET", "/metrics", False),
        ("GET", "/v2/models/a%2Fb/ready", False),  # an invalid name is no probe
        ("GET", "/v2/models/%FF/ready", False),
    ],
)
def test_health_probes_are_the_health_api_group(method: str, path: str, probe: bool) -> None:
    assert is_health_probe(method, path) is probe


# -- the eviction queue against a model of connections ---------------------------------------


@dataclass(eq=False)
class _Conn:
    name: int
    since: float | None = None  # idle since; None: busy


@dataclass
class _World:
    now: float = 0.0
    conns: list[_Conn] = field(default_factory=list)
    next_name: int = 0

    def open(self) -> None:  # a new connection is silent, so idle since now
        self.conns.append(_Conn(self.next_name, self.now))
        self.next_name += 1


def _key(c: _Conn) -> tuple[float, int] | None:
    return None if c.since is None else (c.since, c.name)


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("open"), st.just(0)),
        st.tuples(st.just("busy"), st.integers(0, 50)),
        st.tuples(st.just("idle"), st.integers(0, 50)),
        st.tuples(st.just("close"), st.integers(0, 50)),
        st.tuples(st.just("tick"), st.integers(1, 40)),
        st.tuples(st.just("pop"), st.just(0)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(_steps)
def test_the_queue_gives_the_longest_idle_connection(steps: list[tuple[str, int]]) -> None:
    world = _World()
    queue: EvictionQueue[_Conn] = EvictionQueue(_key)
    quiet_until = float("-inf")
    for action, arg in steps:
        conns = world.conns
        if action == "open":
            world.open()
        elif action == "tick":
            world.now += arg / 1000  # ms: crosses the rescan pause now and then
        elif action == "pop":
            got = queue.pop_longest_idle(conns, world.now)
            idle = [c for c in conns if c.since is not None]
            if got is None:
                # nothing idle, or a scan that found nothing is not repeated so soon
                assert not idle or world.now < quiet_until
                if not idle and world.now >= quiet_until:
                    quiet_until = world.now + RESCAN_AFTER_NONE_IDLE_S
            else:
                assert got in conns
                assert _key(got) == min(key for c in idle if (key := _key(c)) is not None)
                got.since = None  # evicted: a closing connection is never idle
                conns.remove(got)
        elif conns:
            conn = conns[arg % len(conns)]
            if action == "busy":
                conn.since = None
            elif action == "idle" and conn.since is None:
                conn.since = world.now
            elif action == "close":
                conn.since = None
                conns.remove(conn)
        world.now += 1e-6  # time moves between events (ties: the next test)


def test_connections_idle_since_the_same_moment_go_in_the_order_they_opened() -> None:
    # an event loop's clock moves in steps (uvloop: milliseconds), so ties are common
    conns = [_Conn(name, since=1.0) for name in (5, 2, 9, 7)]
    queue: EvictionQueue[_Conn] = EvictionQueue(_key)
    order = []
    while (got := queue.pop_longest_idle(conns, 1.0)) is not None:
        order.append(got.name)
        got.since = None
    assert order == [2, 5, 7, 9]


def test_an_empty_scan_is_not_repeated_at_once() -> None:
    scans = []

    def since(c: _Conn) -> tuple[float, int] | None:
        scans.append(c.name)
        return _key(c)

    queue: EvictionQueue[_Conn] = EvictionQueue(since)
    busy = [_Conn(i) for i in range(100)]
    assert queue.pop_longest_idle(busy, 0.0) is None
    assert len(scans) == 100
    for t in (0.001, RESCAN_AFTER_NONE_IDLE_S / 2):
        assert queue.pop_longest_idle(busy, t) is None
    assert len(scans) == 100  # not scanned again inside the pause
    busy[7].since = 0.01
    assert queue.pop_longest_idle(busy, RESCAN_AFTER_NONE_IDLE_S) is busy[7]
