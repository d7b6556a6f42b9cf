"""Properties of the sequence batcher's pure slot policy, driven by random simulations."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.scheduling.sequence_policy import (
    Batch,
    Item,
    Refusal,
    SequenceSlots,
    SlotPolicy,
)

MS = 1_000_000


@st.composite
def policies(draw: st.DrawFn) -> SlotPolicy:
    strategy = draw(st.sampled_from(["direct", "oldest"]))
    max_batch = draw(st.integers(1, 4))
    slots = max_batch if strategy == "direct" else draw(st.integers(1, 6))
    return SlotPolicy(
        strategy=strategy,
        instances=draw(st.integers(1, 3)),
        slots_per_instance=slots,
        max_batch_size=max_batch,
        max_sequence_idle_ns=draw(st.sampled_from([2 * MS, 50 * MS])),
        max_queue_delay_ns=draw(st.sampled_from([0, 1 * MS])),
        minimum_slot_utilization=draw(st.sampled_from([0.0, 0.5, 1.0])),
        preferred_batch_sizes=tuple(sorted(draw(st.sets(st.integers(1, max_batch), max_size=2)))),
        max_backlog_sequences=draw(st.integers(1, 4)),
        max_queued_requests=draw(st.integers(4, 40)),
    )


# one simulation step: a request of sequence k (start / end flags chosen by the simulation),
# time passing, or an instance finishing its oldest running batch
steps = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("tick"), st.integers(1, 3 * MS), st.just(False)),
        st.tuples(st.just("finish"), st.integers(0, 2), st.just(False)),
    ),
    max_size=80,
)


@given(policies(), steps)
@settings(max_examples=300, deadline=None)
def test_no_request_is_lost_reordered_or_misrouted(policy: SlotPolicy, script: list) -> None:
    slots = SequenceSlots(policy)
    now = 0
    next_id = 0
    open_seqs: dict[int, bool] = {}  # sequence key -> still open (no END sent)
    accepted: dict[int, list[int]] = defaultdict(list)  # key -> item ids, in arrival order
    executed: dict[int, list[int]] = defaultdict(list)
    seat: dict[int, tuple[int, int]] = {}  # key -> (instance, slot) of its current sequence
    running: dict[int, list[Batch]] = defaultdict(list)  # instance -> batches in flight
    busy: set[int] = set()

    def plan() -> None:
        for released in slots.release_idle(now):  # as the driver does before each plan
            open_seqs[released.key] = False  # type: ignore[index]
        free = frozenset(i for i in range(policy.instances) if i not in busy)
        result = slots.plan(now, free)
        for batch in result.batches:
            assert batch.instance in free
            assert 1 <= len(batch.items) <= batch.rows <= policy.max_batch_size
            taken = [slot for _, slot, _ in batch.items]
            if policy.strategy == "direct":  # rows 0..highest slot: an item or padding each
                assert sorted(taken + list(batch.padded)) == list(range(max(taken) + 1))
            else:
                assert batch.padded == ()
            keys = [key for key, _, _ in batch.items]
            assert len(set(keys)) == len(keys)  # one request per sequence per batch
            for key, slot, item in batch.items:
                assert 0 <= slot < policy.slots_per_instance
                where = (batch.instance, slot)
                if item.start:
                    seat[key] = where
                assert seat[key] == where  # a sequence never moves to another slot
                executed[key].append(item.id)
            busy.add(batch.instance)
            running[batch.instance].append(batch)
        if result.wake_at_ns is not None:
            assert result.wake_at_ns > now or result.batches

    for kind, value, flag in script:
        if kind == "send":
            key = value
            start = key not in open_seqs or not open_seqs[key]
            end = flag
            item = Item(next_id, now, start, end)
            refusal = slots.admit(key, item)
            if refusal is None:
                next_id += 1
                accepted[key].append(item.id)
                open_seqs[key] = not end
            else:
                assert refusal in (Refusal.BACKLOG_FULL, Refusal.RELEASED, Refusal.ENDED)
                if refusal is not Refusal.BACKLOG_FULL:
                    open_seqs[key] = False
        elif kind == "tick":
            now += value
        else:
            instance = value % policy.instances
            if running[instance]:
                batch = running[instance].pop(0)
                for key, _, item in batch.items:
                    slots.complete(key, item, now)
                busy.discard(instance)
        plan()

    # let everything run out: finish every batch, let time pass until nothing is left
    for _ in range(400):
        for instance in list(running):
            while running[instance]:
                batch = running[instance].pop(0)
                for key, _, item in batch.items:
                    slots.complete(key, item, now)
            busy.discard(instance)
        now += 10 * MS
        plan()
        if not any(running.values()) and slots.queued == 0:
            break
    assert slots.queued == 0
    for key, ids in accepted.items():
        assert executed[key] == ids  # every accepted request ran once, in arrival order
    assert slots.active + slots.backlogged <= policy.instances * policy.slots_per_instance + (
        policy.max_backlog_sequences
    )


def _policy(**overrides: object) -> SlotPolicy:
    base: dict[str, object] = {
        "strategy": "oldest",
        "instances": 1,
        "slots_per_instance": 2,
        "max_batch_size": 2,
        "max_sequence_idle_ns": 10 * MS,
        "max_backlog_sequences": 1,
    }
    base.update(overrides)
    return SlotPolicy(**base)  # type: ignore[arg-type]


def test_refusals_name_the_problem() -> None:
    slots = SequenceSlots(_policy())
    assert slots.admit(1, Item(1, 0, start=False, end=False)) is Refusal.NOT_STARTED
    assert slots.admit(1, Item(2, 0, start=True, end=False)) is None
    assert slots.admit(1, Item(4, 0, start=False, end=True)) is None
    assert slots.admit(1, Item(5, 0, start=False, end=False)) is Refusal.ENDED
    # two slots and a backlog of one: the fourth sequence is refused
    assert slots.admit(2, Item(6, 0, start=True, end=False)) is None
    assert slots.admit(3, Item(7, 0, start=True, end=False)) is None
    assert slots.backlogged == 1
    assert slots.admit(4, Item(8, 0, start=True, end=False)) is Refusal.BACKLOG_FULL


def test_a_start_on_an_open_sequence_ends_it_and_starts_a_new_one_in_its_slot() -> None:
    """Triton: the previous sequence is terminated early; its queued requests still run, in
    order, then the new START, in the same slot."""
    slots = SequenceSlots(_policy(slots_per_instance=1, max_batch_size=1))
    first = Item(1, 0, start=True, end=False)
    assert slots.admit(7, first) is None
    assert [b.items for b in slots.plan(0, frozenset({0})).batches] == [((7, 0, first),)]
    queued = Item(2, 1, start=False, end=False)
    restart = Item(3, 2, start=True, end=False)
    assert slots.admit(7, queued) is None
    assert slots.is_open(7)
    assert slots.admit(7, restart) is None  # not refused
    assert (slots.restarted, slots.started, slots.ended) == (1, 2, 1)
    # a second sequence waits: the restarted id keeps its slot
    assert slots.admit(8, Item(4, 3, start=True, end=False)) is None
    assert slots.backlogged == 1
    ran = []
    for item in (first, queued, restart):
        if item is not first:
            (batch,) = slots.plan(5, frozenset({0})).batches
            ran.append(batch.items[0][2])
        slots.complete(7, item, 5)
    assert ran == [queued, restart]
    assert slots.slot_of(7) == (0, 0)
    # the new sequence is open: it continues, and ends normally
    end = Item(5, 6, start=False, end=True)
    assert slots.admit(7, end) is None
    (batch,) = slots.plan(6, frozenset({0})).batches
    assert batch.items == ((7, 0, end),)
    slots.complete(7, end, 7)
    assert not slots.is_live(7)
    assert slots.slot_of(8) == (0, 0)
    assert (slots.restarted, slots.ended) == (1, 2)


def test_a_start_on_a_backlogged_open_sequence_follows_its_requests() -> None:
    slots = SequenceSlots(_policy(slots_per_instance=1, max_batch_size=1, max_backlog_sequences=4))
    holder = Item(1, 0, start=True, end=False)
    assert slots.admit("a", holder) is None
    waiting = Item(2, 1, start=True, end=False)
    restart = Item(3, 2, start=True, end=True)
    assert slots.admit("b", waiting) is None
    assert slots.admit("b", restart) is None
    assert (slots.backlogged, slots.restarted) == (1, 1)
    (batch,) = slots.plan(3, frozenset({0})).batches
    assert batch.items == (("a", 0, holder),)
    slots.complete("a", holder, 4)
    assert slots.admit("a", Item(4, 5, start=False, end=True)) is None
    (batch,) = slots.plan(5, frozenset({0})).batches
    slots.complete("a", batch.items[0][2], 6)
    ran = []
    for _ in range(2):
        (batch,) = slots.plan(7, frozenset({0})).batches
        ran.append(batch.items[0][2])
        slots.complete("b", batch.items[0][2], 8)
    assert ran == [waiting, restart]
    assert (slots.active, slots.queued) == (0, 0)


def test_an_idle_sequence_is_released_and_its_slot_reused() -> None:
    slots = SequenceSlots(_policy(slots_per_instance=1, max_batch_size=1))
    start = Item(1, 0, start=True, end=False)
    assert slots.admit("a", start) is None
    assert len(slots.plan(0, frozenset({0})).batches) == 1
    slots.complete("a", start, 1 * MS)
    assert slots.admit("b", Item(2, 2 * MS, start=True, end=False)) is None
    assert slots.backlogged == 1
    plan = slots.plan(2 * MS, frozenset({0}))
    assert plan.batches == ()
    assert plan.wake_at_ns == 11 * MS  # a's idle deadline
    assert [r.key for r in slots.release_idle(11 * MS)] == ["a"]
    assert slots.slot_of("b") == (0, 0)
    assert slots.admit("a", Item(3, 12 * MS, start=False, end=False)) is Refusal.RELEASED


@pytest.mark.parametrize("strategy", ["direct", "oldest"])
def test_one_request_per_sequence_runs_at_a_time(strategy: str) -> None:
    slots = SequenceSlots(_policy(strategy=strategy))
    items = [Item(i, i, start=i == 0, end=False) for i in range(3)]
    for item in items:
        assert slots.admit(7, item) is None
    first = slots.plan(10, frozenset({0})).batches
    assert [i.id for b in first for _, _, i in b.items] == [0]
    assert slots.plan(10, frozenset({0})).batches == ()  # 0 still running
    slots.complete(7, items[0], 11)
    second = slots.plan(11, frozenset({0})).batches
    assert [i.id for b in second for _, _, i in b.items] == [1]


def _delayed() -> SlotPolicy:
    return _policy(max_queue_delay_ns=5 * MS, slots_per_instance=4, max_batch_size=3)


def test_oldest_waits_for_its_queue_delay_then_batches_the_oldest() -> None:
    slots = SequenceSlots(
        _policy(max_queue_delay_ns=5 * MS, slots_per_instance=4, max_batch_size=3)
    )
    for key in range(4):
        assert slots.admit(key, Item(key, key * MS, start=True, end=False)) is None
    plan = slots.plan(3 * MS, frozenset({0}))
    assert [[k for k, _, _ in b.items] for b in plan.batches] == [[0, 1, 2]]  # full batch
    slots2 = SequenceSlots(
        _policy(max_queue_delay_ns=5 * MS, slots_per_instance=4, max_batch_size=3)
    )
    assert slots2.admit(9, Item(0, 0, start=True, end=False)) is None
    early = slots2.plan(1 * MS, frozenset({0}))
    assert early.batches == ()
    assert early.wake_at_ns == 5 * MS
    assert len(slots2.plan(5 * MS, frozenset({0})).batches) == 1


def test_direct_pads_idle_slots_below_the_highest_ready_one() -> None:
    slots = SequenceSlots(_policy(strategy="direct", slots_per_instance=4, max_batch_size=4))
    starts = [Item(key, 0, start=True, end=False) for key in range(3)]
    for key, item in enumerate(starts):
        assert slots.admit(key, item) is None
        assert slots.slot_of(key) == (0, key)
    (first,) = slots.plan(0, frozenset({0})).batches
    assert [slot for _, slot, _ in first.items] == [0, 1, 2]
    assert first.padded == ()
    for key, item in enumerate(starts):
        slots.complete(key, item, 1)
    # only the sequence in slot 2 sends: slots 0 and 1 are padded, slot 3 is not
    assert slots.admit(2, Item(10, 2, start=False, end=False)) is None
    (alone,) = slots.plan(2, frozenset({0})).batches
    assert [slot for _, slot, _ in alone.items] == [2]
    assert alone.padded == (0, 1)
    assert alone.rows == 3
    slots.complete(2, alone.items[0][2], 3)
    # slot 0 alone: nothing to pad
    assert slots.admit(0, Item(11, 4, start=False, end=False)) is None
    (low,) = slots.plan(4, frozenset({0})).batches
    assert low.padded == ()
    assert low.rows == 1


def test_oldest_never_pads() -> None:
    slots = SequenceSlots(_policy(strategy="oldest", slots_per_instance=4, max_batch_size=4))
    starts = [Item(key, 0, start=True, end=False) for key in range(3)]
    for key, item in enumerate(starts):
        assert slots.admit(key, item) is None
    slots.plan(0, frozenset({0}))
    for key, item in enumerate(starts):
        slots.complete(key, item, 1)
    assert slots.admit(2, Item(10, 2, start=False, end=False)) is None
    (alone,) = slots.plan(2, frozenset({0})).batches
    assert [slot for _, slot, _ in alone.items] == [2]
    assert alone.padded == ()
    assert alone.rows == 1
