"""The shared-memory descriptor ring: order, loss, duplication, fullness and size limits,
between threads and between spawned processes."""

from __future__ import annotations

import multiprocessing
import struct
import threading
import time

import hypothesis
import pytest
from hypothesis import strategies as st

from inferd.server.frontends import (
    DescriptorTooLargeError,
    Doorbell,
    Put,
    Ring,
    RingError,
    available,
)
from inferd.server.frontends.shared import Segment

pytestmark = pytest.mark.skipif(not available(), reason="needs Linux eventfd and /dev/shm")

ITEM = struct.Struct("<II")  # producer id, sequence number
SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def rings() -> list[Ring]:
    made: list[Ring] = []
    yield made
    for ring in made:
        ring.close()
        ring.unlink()


def _make(rings: list[Ring], slots: int, slot_bytes: int) -> Ring:
    ring = Ring.create(None, slots, slot_bytes)
    rings.append(ring)
    return ring


def _payload(producer: int, seq: int) -> bytes:
    # variable length, so a slot's length word is checked too
    return ITEM.pack(producer, seq) + bytes([seq % 251]) * (seq % 17)


def _check(data: bytes) -> tuple[int, int]:
    producer, seq = ITEM.unpack_from(data)
    assert data[ITEM.size :] == bytes([seq % 251]) * (seq % 17), "payload corrupted"
    return producer, seq


def _produce(name: str, producer: int, count: int, bell: Doorbell) -> None:
    """Put ``count`` items, spinning while full; ring the consumer only on WAKE."""
    ring = Ring.attach(name)
    try:
        for seq in range(count):
            payload = _payload(producer, seq)
            while (put := ring.offer(payload)) is Put.FULL:
                time.sleep(0)  # let the consumer (maybe a thread of this process) run
            if put is Put.WAKE:
                bell.ring()
    finally:
        ring.close()


def _consume_all(rings: list[Ring], bell: Doorbell, count: int) -> dict[int, list[int]]:
    """Read ``count`` items from ``rings``, sleeping on ``bell`` whenever all are empty (each
    ring told that the consumer sleeps, then looked at once more: the eventcount)."""
    seen: dict[int, list[int]] = {}
    got = 0
    while got < count:
        progressed = False
        for ring in rings:
            while (data := ring.try_get()) is not None:
                producer, seq = _check(data)
                seen.setdefault(producer, []).append(seq)
                got += 1
                progressed = True
        if not progressed:
            if all(ring.prepare_to_sleep() for ring in rings):
                # a lost wake-up shows as a timeout here, never as a hang (generous: spawned
                # producers may take long to start on a busy machine)
                assert bell.wait(timeout_s=60), f"no doorbell after {got} of {count} items"
                bell.drain()
            for ring in rings:
                ring.awake()
    return seen


def test_put_get_in_order_and_empty_is_none(rings: list[Ring]) -> None:
    ring = _make(rings, 4, 64)
    assert ring.try_get() is None
    for seq in range(10):  # wraps around the 4 slots
        assert ring.try_put(_payload(0, seq))
        assert _check(ring.try_get() or b"") == (0, seq)
    assert ring.try_get() is None


def test_full_ring_refuses_without_corruption(rings: list[Ring]) -> None:
    ring = _make(rings, 8, 64)
    for seq in range(8):
        assert ring.try_put(_payload(1, seq))
    assert len(ring) == 8
    assert ring.try_put(_payload(1, 99)) is False
    assert ring.offer(_payload(1, 99)) is Put.FULL
    assert [_check(ring.try_get() or b"")[1] for _ in range(8)] == list(range(8))
    assert ring.try_get() is None
    assert ring.try_put(_payload(1, 8))
    assert _check(ring.try_get() or b"") == (1, 8)


def test_descriptor_larger_than_a_slot_is_refused(rings: list[Ring]) -> None:
    ring = _make(rings, 2, 32)
    assert ring.try_put(b"x" * 32)
    with pytest.raises(DescriptorTooLargeError, match=r"33 bytes does not fit a ring slot of 32"):
        ring.try_put(memoryview(b"y" * 33))
    assert ring.try_get() == b"x" * 32
    assert ring.try_get() is None


def test_memoryview_payloads_of_any_format(rings: list[Ring]) -> None:
    ring = _make(rings, 2, 64)
    words = memoryview(bytearray(16)).cast("q")
    words[0], words[1] = 7, -1
    assert ring.try_put(words)
    assert struct.unpack("<qq", ring.try_get() or b"") == (7, -1)


def test_attach_sees_the_creators_items(rings: list[Ring]) -> None:
    ring = _make(rings, 4, 16)
    ring.try_put(b"one")
    other = Ring.attach(ring.name)
    try:
        assert (other.slots, other.slot_bytes) == (4, 16)
        assert other.try_get() == b"one"
        assert ring.try_put(b"two")
        assert ring.try_put(b"three")
        assert other.try_get() == b"two"
        assert other.try_get() == b"three"
    finally:
        other.close()


def test_a_segment_that_is_not_a_ring_is_refused() -> None:
    segment = Segment.create(None, 4096)
    try:
        with pytest.raises(RingError, match="not an inferd ring"):
            Ring.attach(segment.name)
    finally:
        segment.close()
        segment.unlink()


def test_bad_geometry_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        Ring.create(None, 0, 64)
    with pytest.raises(ValueError, match="slot_bytes"):
        Ring.create(None, 4, 0)


def test_many_producer_threads_one_consumer_thread(rings: list[Ring]) -> None:
    producers, count = 6, 2000
    bell = Doorbell()
    made = [_make(rings, 16, 64) for _ in range(producers)]
    threads = [
        threading.Thread(target=_produce, args=(ring.name, i, count, bell))
        for i, ring in enumerate(made)
    ]
    for thread in threads:
        thread.start()
    try:
        seen = _consume_all(made, bell, producers * count)
    finally:
        for thread in threads:
            thread.join()
        bell.close()
    assert seen == {i: list(range(count)) for i in range(producers)}
    assert all(ring.try_get() is None for ring in made)


def test_one_ring_shared_by_a_producer_and_a_consumer_thread(rings: list[Ring]) -> None:
    ring = _make(rings, 4, 64)
    bell = Doorbell()
    count = 20000
    thread = threading.Thread(target=_produce, args=(ring.name, 3, count, bell))
    thread.start()
    try:
        seen = _consume_all([ring], bell, count)
    finally:
        thread.join()
        bell.close()
    assert seen == {3: list(range(count))}


def test_many_producer_processes_one_consumer(rings: list[Ring]) -> None:
    producers, count = 4, 5000
    bell = Doorbell()
    made = [_make(rings, 8, 64) for _ in range(producers)]
    procs = [
        SPAWN.Process(target=_produce, args=(ring.name, i, count, bell))
        for i, ring in enumerate(made)
    ]
    for proc in procs:
        proc.start()
    seen: dict[int, list[int]] = {}
    try:
        seen = _consume_all(made, bell, producers * count)
    finally:
        for proc in procs:
            proc.join(timeout=30 if seen else 0)
            if proc.is_alive():  # the consumer failed: the producer spins on a full ring
                proc.kill()
                proc.join()
        bell.close()
    assert [proc.exitcode for proc in procs] == [0] * producers
    assert seen == {i: list(range(count)) for i in range(producers)}


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(
    slots=st.integers(1, 5),
    steps=st.lists(
        st.one_of(st.integers(0, 24), st.none(), st.sampled_from(["sleep", "wake"])), max_size=80
    ),
)
def test_ring_behaves_like_a_bounded_queue(slots: int, steps: list[int | str | None]) -> None:
    """Any sequence of puts (a length), gets (None) and the consumer going to sleep or waking
    matches a bounded FIFO model, and a put asks for a doorbell exactly when the consumer
    sleeps and nobody rang since it fell asleep."""
    ring = Ring.create(None, slots, 24)
    model: list[bytes] = []
    asleep = rung = False
    try:
        for i, step in enumerate(steps):
            if step is None:
                assert ring.try_get() == (model.pop(0) if model else None)
            elif step == "sleep":
                assert ring.prepare_to_sleep() is (not model)
                asleep, rung = not model, False
            elif step == "wake":
                ring.awake()
                asleep = False
            else:
                assert isinstance(step, int)
                payload = bytes([i % 256]) * step
                put = ring.offer(payload)
                if len(model) == slots:
                    assert put is Put.FULL
                else:
                    assert put is (Put.WAKE if asleep and not rung else Put.QUEUED)
                    rung = rung or asleep
                    model.append(payload)
            assert len(ring) == len(model)
    finally:
        ring.close()
        ring.unlink()


def _get_or_sleep(ring: Ring, bell: Doorbell, timeout_s: float) -> bytes:
    """The next descriptor, sleeping on ``bell`` (eventcount) while there is none."""
    while (data := ring.try_get()) is None:
        if ring.prepare_to_sleep():
            if not bell.wait(timeout_s=timeout_s):
                raise TimeoutError("lost wake-up: the ring has no doorbell after a put")
            bell.drain()
        ring.awake()
    return data


def _put_and_ring(ring: Ring, bell: Doorbell, payload: bytes) -> None:
    while (put := ring.offer(payload)) is Put.FULL:
        time.sleep(0)
    if put is Put.WAKE:
        bell.ring()


def _echo(inbox: str, outbox: str, wake: Doorbell, peer: Doorbell, count: int) -> None:
    incoming, outgoing = Ring.attach(inbox), Ring.attach(outbox)
    try:
        for _ in range(count):
            _put_and_ring(outgoing, peer, _get_or_sleep(incoming, wake, 60))
    finally:
        incoming.close()
        outgoing.close()


@pytest.mark.parametrize("window", [1, 3])
def test_ping_pong_with_a_spawned_process_never_loses_a_wake_up(
    rings: list[Ring], window: int
) -> None:
    """Both sides sleep whenever their ring is empty, so every round trip races a put against
    a consumer falling asleep, thousands of times; a lost wake-up fails on its timeout."""
    count = 3000
    to_child, to_parent = _make(rings, 4, 32), _make(rings, 4, 32)
    child_bell, parent_bell = Doorbell(), Doorbell()
    child = SPAWN.Process(
        target=_echo, args=(to_child.name, to_parent.name, child_bell, parent_bell, count)
    )
    child.start()
    got: list[bytes] = []
    try:
        for seq in range(window):
            _put_and_ring(to_child, child_bell, _payload(0, seq))
        for seq in range(count):
            got.append(_get_or_sleep(to_parent, parent_bell, 60))
            if seq + window < count:
                _put_and_ring(to_child, child_bell, _payload(0, seq + window))
    finally:
        child.join(timeout=30 if len(got) == count else 0)
        if child.is_alive():
            child.kill()
            child.join()
        child_bell.close()
        parent_bell.close()
    assert child.exitcode == 0
    assert [_check(data) for data in got] == [(0, seq) for seq in range(count)]
