"""Properties of the pure dynamic batching policy."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.scheduling.policy import BatchPolicy, CloseReason, PendingView, decide

MS = 1_000_000


@st.composite
def policies(draw: st.DrawFn) -> BatchPolicy:
    max_batch = draw(st.integers(1, 16))
    preferred = tuple(sorted(draw(st.sets(st.integers(1, max_batch), max_size=3))))
    delay = draw(st.sampled_from([0, 1 * MS, 5 * MS]))
    return BatchPolicy(max_batch, preferred, delay)


@st.composite
def queues(draw: st.DrawFn, max_rows: int = 4) -> list[PendingView]:
    n = draw(st.integers(0, 12))
    arrivals = sorted(draw(st.lists(st.integers(0, 10 * MS), min_size=n, max_size=n)))
    out = []
    for arrival in arrivals:
        timeout = draw(st.one_of(st.none(), st.integers(1, 10 * MS)))
        out.append(
            PendingView(
                rows=draw(st.integers(1, max_rows)),
                shape_key=draw(st.sampled_from(["a", "a", "a", "b"])),
                arrival_ns=arrival,
                deadline_ns=None if timeout is None else arrival + timeout,
                reject_on_timeout=draw(st.booleans()),
            )
        )
    return out


@given(policies(), queues(), st.integers(0, 20 * MS), st.integers(0, 3))
@settings(max_examples=400)
def test_one_decision_is_sound(
    policy: BatchPolicy, pending: list[PendingView], now: int, free: int
) -> None:
    d = decide(pending, now, policy, free)
    taken, expired = set(d.take), set(d.expired)
    assert len(taken) == len(d.take)  # no duplicates
    assert not taken & expired
    # exactly the REJECT requests past their deadline expire
    assert expired == {
        i
        for i, p in enumerate(pending)
        if p.reject_on_timeout and p.deadline_ns is not None and p.deadline_ns <= now
    }
    if free == 0:
        assert d.take == ()
    if d.take:
        live = [i for i in range(len(pending)) if i not in expired]
        assert list(d.take) == live[: len(d.take)]  # service order: a prefix of the live queue
        head = pending[d.take[0]]
        assert all(pending[i].shape_key == head.shape_key for i in d.take)
        rows = sum(pending[i].rows for i in d.take)
        # a single request larger than the bound still runs alone (the engine checks the bound)
        assert rows <= policy.max_batch_size or len(d.take) == 1
        assert d.reason is not None


@given(policies(), queues(max_rows=1), st.integers(0, 20 * MS))
@settings(max_examples=300)
def test_no_request_waits_past_its_delay_while_an_instance_is_idle(
    policy: BatchPolicy, pending: list[PendingView], now: int
) -> None:
    d = decide(pending, now, policy, free_instances=1)
    live = [i for i in range(len(pending)) if i not in set(d.expired)]
    if not live:
        return
    oldest = pending[live[0]]
    if now - oldest.arrival_ns >= policy.max_queue_delay_ns:
        assert d.take, "an idle instance and an overdue request, yet nothing was sent"
    else:
        assert d.take or (
            d.wake_at_ns is not None
            and d.wake_at_ns <= oldest.arrival_ns + policy.max_queue_delay_ns
        )


@given(policies(), queues(), st.integers(1, 3))
@settings(max_examples=200)
def test_simulation_loses_and_duplicates_nothing(
    policy: BatchPolicy, arrivals: list[PendingView], instances: int
) -> None:
    """Drive decide() like the driver does; every request ends exactly once."""
    pending: list[tuple[int, PendingView]] = []
    outcome: dict[int, str] = {}
    busy_until: list[int] = []
    now = 0
    upcoming = list(enumerate(arrivals))
    for _ in range(10_000):
        busy_until = [t for t in busy_until if t > now]
        while upcoming and upcoming[0][1].arrival_ns <= now:
            pending.append(upcoming.pop(0))
        d = decide([p for _, p in pending], now, policy, instances - len(busy_until))
        for i in d.expired:
            rid = pending[i][0]
            assert rid not in outcome
            outcome[rid] = "expired"
        for i in d.take:
            rid = pending[i][0]
            assert rid not in outcome
            outcome[rid] = "ran"
        if d.take:
            busy_until.append(now + 2 * MS)
        gone = set(d.take) | set(d.expired)
        pending = [p for i, p in enumerate(pending) if i not in gone]
        if not pending and not upcoming:
            break
        if d.take:
            continue  # another batch may be ready at once
        events = [t for t in busy_until] + ([upcoming[0][1].arrival_ns] if upcoming else [])
        if d.wake_at_ns is not None:
            events.append(d.wake_at_ns)
        later = [t for t in events if t > now]
        now = min(later) if later else now + MS
    assert set(outcome) == set(range(len(arrivals)))


def test_waits_for_more_then_sends_at_the_delay() -> None:
    policy = BatchPolicy(8, (8,), 5 * MS)
    pending = [PendingView(1, "a", 0), PendingView(1, "a", 1 * MS)]
    d = decide(pending, 2 * MS, policy, 1)
    assert d.take == ()
    assert d.wake_at_ns == 5 * MS
    d = decide(pending, 5 * MS, policy, 1)
    assert d.take == (0, 1)
    assert d.reason is CloseReason.DELAY_EXPIRED


def test_preferred_size_goes_at_once_and_full_batches_close() -> None:
    policy = BatchPolicy(8, (4, 8), 100 * MS)
    pending = [PendingView(1, "a", t) for t in range(6)]
    d = decide(pending, 10, policy, 1)
    assert d.take == (0, 1, 2, 3)
    assert d.reason is CloseReason.PREFERRED
    many = [PendingView(3, "a", t) for t in range(4)]
    d = decide(many, 10, policy, 1)
    assert d.take == (0, 1)  # 6 rows; a third request would overflow 8
    assert d.reason is CloseReason.NO_ROOM


def test_shape_mismatch_closes_the_batch() -> None:
    policy = BatchPolicy(8, (8,), 100 * MS)
    pending = [PendingView(1, "a", 0), PendingView(1, "b", 1), PendingView(1, "a", 2)]
    d = decide(pending, 3, policy, 1)
    assert d.take == (0,)
    assert d.reason is CloseReason.SHAPE_MISMATCH


def test_busy_instances_let_the_batch_grow() -> None:
    policy = BatchPolicy(8, (), 0)
    pending = [PendingView(1, "a", t) for t in range(5)]
    assert decide(pending, 10, policy, 0).take == ()
    assert decide(pending, 10, policy, 1).take == (0, 1, 2, 3, 4)


def test_timeouts_reject_or_delay() -> None:
    policy = BatchPolicy(8, (8,), 100 * MS)
    pending = [
        PendingView(1, "a", 0, deadline_ns=5, reject_on_timeout=True),
        PendingView(1, "a", 0, deadline_ns=5, reject_on_timeout=False),
        PendingView(1, "a", 0, deadline_ns=50),
    ]
    d = decide(pending, 10, policy, 1)
    assert d.expired == (0,)
    assert d.wake_at_ns == 50  # the next deadline comes before the queue delay
