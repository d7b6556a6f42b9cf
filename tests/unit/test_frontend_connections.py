"""The HTTP connection count the front ends share (``--http-max-connections`` with
``--frontends``): one limit for all, the longest idle of any front end makes room, a dead
front end's share is forgotten, and the check-and-count holds across processes."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from inferd.frontends.http.slots import IdleOrder
from inferd.server.frontends import available
from inferd.server.frontends.connections import ConnectionTable

pytestmark = pytest.mark.skipif(not available(), reason="needs Linux eventfd and /dev/shm")


@pytest.fixture
def engine() -> Iterator[ConnectionTable]:
    table = ConnectionTable.create(2)
    yield table
    table.close()


def _frontend(engine: ConnectionTable, index: int) -> ConnectionTable:
    """What front end ``index`` attaches, from copies of what it would inherit."""
    return ConnectionTable.attach([os.dup(fd) for fd in engine.fds()], index)


def test_one_limit_for_every_front_end(engine: ConnectionTable) -> None:
    first, second = _frontend(engine, 0), _frontend(engine, 1)
    try:
        a, b = first.port("http"), second.port("http")
        assert [a.take(3), b.take(3), a.take(3)] == [True, True, True]
        assert not b.take(3)  # three held between them
        assert not a.take(3)
        assert engine.total("http") == 3
        assert second.port("openai").take(3)  # another port, another count
        a.release()
        assert b.take(3)
        assert engine.total("http") == 3
    finally:
        first.close()
        second.close()


def test_a_dead_front_end_leaves_no_slot_taken(engine: ConnectionTable) -> None:
    first = _frontend(engine, 0)
    count = first.port("http")
    assert [count.take(2), count.take(2)] == [True, True]
    first.close()  # it is gone without releasing them
    assert engine.total("http") == 2
    engine.reset(0)
    assert engine.total("http") == 0
    again = _frontend(engine, 0)
    try:
        assert again.port("http").take(2)
    finally:
        again.close()


async def test_the_longest_idle_connection_of_another_front_end_is_closed_on_request(
    engine: ConnectionTable,
) -> None:
    first, second = _frontend(engine, 0), _frontend(engine, 1)
    loop = asyncio.get_running_loop()
    try:
        a, b = first.port("http"), second.port("http")
        closed = asyncio.Event()
        b.set_closer(closed.set)
        second.watch(loop)
        assert a.oldest_elsewhere() is None
        b.publish_idle(100.25)
        assert a.oldest_elsewhere() == (100.25, 1)
        assert b.oldest_elsewhere() is None  # its own is not elsewhere
        a.publish_idle(50.5)
        assert b.oldest_elsewhere() == (50.5, 0)
        a.ask_to_close_idle(1)
        await asyncio.wait_for(closed.wait(), 10)
        b.publish_idle(None)
        assert a.oldest_elsewhere() is None
    finally:
        first.close()
        second.close()


def test_attach_refuses_a_table_that_is_not_one(engine: ConnectionTable) -> None:
    fd = os.memfd_create("not-a-table")
    os.ftruncate(fd, 4096)
    bells = [os.dup(f) for f in engine.fds()[1:]]
    with pytest.raises(ValueError, match="not an inferd connection table"):
        ConnectionTable.attach([fd, *bells], 0)
    with pytest.raises(ValueError, match="2 front ends"):
        ConnectionTable.attach([os.dup(f) for f in engine.fds()], 2)


_HOLDER = """
import sys
from inferd.server.frontends.connections import ConnectionTable
table = ConnectionTable.attach([int(fd) for fd in sys.argv[1:]], 1)
with table._locked():
    print("locked", flush=True)
    sys.stdin.read()  # until the test closes it
"""


def test_a_front_end_counts_only_while_no_other_holds_the_table(engine: ConnectionTable) -> None:
    """The check against the limit and the count are one step under the table's lock: a
    front end that takes while another process holds the lock waits for it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, *(str(fd) for fd in engine.fds())],
        pass_fds=engine.fds(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    first = _frontend(engine, 0)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        taken = threading.Event()
        taker = threading.Thread(target=lambda: first.port("http").take(1) and taken.set())
        taker.start()
        assert not taken.wait(0.5)  # blocked behind the other process's lock
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(30) == 0
        taker.join(30)
        assert taken.is_set()
        assert engine.total("http") == 1
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()
        first.close()


def test_idle_order_publishes_the_longest_idle_whenever_it_changes() -> None:
    published: list[float | None] = []
    order: IdleOrder[str] = IdleOrder(published.append)
    order.idle("a", 1.0)
    order.idle("b", 2.0)
    order.idle("c", 3.0)
    assert order.oldest() == (1.0, "a")
    order.busy("b")  # not the oldest: nothing to publish
    assert published == [1.0]
    order.busy("a")
    assert order.oldest() == (3.0, "c")
    order.idle("a", 4.0)  # idle again: now the newest
    order.busy("c")
    assert order.oldest() == (4.0, "a")
    order.busy("a")
    order.busy("a")  # not idle: nothing changes
    assert order.oldest() is None
    assert published == [1.0, 3.0, 4.0, None]


@pytest.mark.parametrize("seed", range(20))
def test_idle_order_always_publishes_the_head_and_only_its_changes(seed: int) -> None:
    """Against the definition (a dict in idle order), over random idle/busy sequences with
    ties in time: the last value published is always the head's time, and a value is published
    only when it differs from the one before."""
    rng = random.Random(seed)
    published: list[float | None] = []
    order: IdleOrder[int] = IdleOrder(published.append)
    expected: dict[int, float] = {}
    now = 0.0
    for _ in range(500):
        item = rng.randrange(6)
        if rng.random() < 0.5:
            now += rng.choice((0.0, 1.0))  # ties: several items idle since the same time
            order.idle(item, now)
            expected.pop(item, None)
            expected[item] = now
        else:
            order.busy(item)
            expected.pop(item, None)
        head = next(iter(expected.items()), None)
        assert (published[-1] if published else None) == (None if head is None else head[1])
        assert order.oldest() == (None if head is None else (head[1], head[0]))
    assert all(a != b for a, b in itertools.pairwise(published))
