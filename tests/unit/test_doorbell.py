"""The eventfd doorbell, and the rule that a ring rings it only for a consumer that said it
sleeps, once per sleep (counted: every write to the eventfd is visible in its counter)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest

from inferd.server.frontends import Doorbell, Put, Ring, available

pytestmark = pytest.mark.skipif(not available(), reason="needs Linux eventfd and /dev/shm")

SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def bell() -> Doorbell:
    made = Doorbell()
    yield made
    made.close()


@pytest.fixture
def ring() -> Ring:
    made = Ring.create(None, 64, 32)
    yield made
    made.close()
    made.unlink()


def _put(ring: Ring, bell: Doorbell, payload: bytes) -> None:
    if ring.offer(payload) is Put.WAKE:
        bell.ring()


def test_drain_returns_the_rings_and_resets(bell: Doorbell) -> None:
    assert bell.drain() == 0
    assert not bell.wait(timeout_s=0)
    bell.ring()
    bell.ring()
    assert bell.wait(timeout_s=0)
    assert bell.drain() == 2
    assert bell.drain() == 0
    assert bell.rung == 2


def test_rung_once_per_sleep_of_the_consumer(ring: Ring, bell: Doorbell) -> None:
    assert ring.prepare_to_sleep()  # empty: the consumer sleeps
    for i in range(50):  # one write for fifty descriptors put while it sleeps
        _put(ring, bell, b"%d" % i)
    assert bell.drain() == 1
    ring.awake()
    for _ in range(49):
        assert ring.try_get() is not None
    _put(ring, bell, b"x")  # awake and behind: no write
    assert bell.drain() == 0
    while ring.try_get() is not None:
        pass
    _put(ring, bell, b"y")  # awake with the ring empty (busy elsewhere): still no write
    assert bell.drain() == 0
    assert not ring.prepare_to_sleep()  # "y" is waiting: it reads on instead of sleeping
    assert ring.try_get() == b"y"
    _put(ring, bell, b"z")  # it said it was awake again
    assert bell.drain() == 0
    assert ring.try_get() == b"z"
    assert ring.prepare_to_sleep()
    _put(ring, bell, b"w")  # asleep again: one write
    _put(ring, bell, b"v")
    assert bell.drain() == 1
    assert bell.rung == 2


def test_an_awake_consumer_costs_no_doorbell(ring: Ring, bell: Doorbell) -> None:
    for i in range(10):  # the ring goes empty after every put, and nobody sleeps
        _put(ring, bell, b"%d" % i)
        assert ring.try_get() == b"%d" % i
    assert bell.drain() == 0


def test_a_consumer_sleeping_after_every_get_is_rung_every_time(ring: Ring, bell: Doorbell) -> None:
    for i in range(10):
        assert ring.prepare_to_sleep()
        _put(ring, bell, b"%d" % i)
        assert bell.drain() == 1
        ring.awake()
        assert ring.try_get() == b"%d" % i
    assert bell.rung == 10


def test_epochs_carry_over_to_a_consumer_that_attaches_again(ring: Ring, bell: Doorbell) -> None:
    assert ring.prepare_to_sleep()
    _put(ring, bell, b"a")  # rung for the first epoch
    assert bell.drain() == 1
    again = Ring.attach(ring.name)  # a new consumer view of the same ring
    try:
        assert again.try_get() == b"a"
        assert again.prepare_to_sleep()  # a later epoch, never one the producer rang for
        _put(ring, bell, b"b")
        assert bell.drain() == 1
    finally:
        again.close()


def _ring_times(bell: Doorbell, times: int) -> None:
    for _ in range(times):
        bell.ring()


def test_rung_from_a_spawned_process(bell: Doorbell) -> None:
    child = SPAWN.Process(target=_ring_times, args=(bell, 3))
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    assert bell.wait(timeout_s=0)
    assert bell.drain() == 3


def test_rung_from_a_subprocess_given_the_fd(bell: Doorbell) -> None:
    fd = bell.fileno()
    code = (
        "import sys; from inferd.server.frontends import Doorbell;"
        "b = Doorbell.from_fd(int(sys.argv[1])); b.ring(); b.ring()"
    )
    subprocess.run([sys.executable, "-c", code, str(fd)], pass_fds=[fd], check=True, timeout=60)
    assert bell.drain() == 2


def test_duplicate_is_the_same_counter_closed_apart(bell: Doorbell) -> None:
    other = bell.duplicate()
    other.ring()
    other.close()
    assert bell.drain() == 1
    with pytest.raises(ValueError, match="closed"):
        other.fileno()


def test_the_descriptor_is_not_inherited_by_accident(bell: Doorbell) -> None:
    assert not os.get_inheritable(bell.fileno())
    assert not os.get_blocking(bell.fileno())
