"""The shared-memory tensor arena: allocation, release, runs of slots, and reclaiming the
slots of a producer process killed mid-stream."""

from __future__ import annotations

import multiprocessing
import os
import signal
import struct

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from inferd.server.frontends import Arena, ArenaError, Block, Doorbell, Put, Ring, available
from inferd.server.frontends.shared import Segment

pytestmark = pytest.mark.skipif(not available(), reason="needs Linux eventfd and /dev/shm")

SPAWN = multiprocessing.get_context("spawn")
BLOCK = struct.Struct("<qqqqq")  # first, count, offset, nbytes, holder


@pytest.fixture
def arena() -> Arena:
    made = Arena.create(None, 16, 100)  # slot_bytes rounds up to 128
    yield made
    made.close()
    made.unlink()


def test_geometry_and_alignment(arena: Arena) -> None:
    assert (arena.slots, arena.slot_bytes) == (16, 128)
    block = arena.allocate(10, holder=1)
    assert block is not None
    assert block.offset % 64 == 0
    assert arena.free_slots() == 15


def test_bytes_written_are_read_through_another_mapping(arena: Arena) -> None:
    block = arena.allocate(300, holder=1)
    assert block is not None
    assert block.count == 3
    view = arena.view(block)
    view[:] = bytes(range(256)) + bytes(44)
    view.release()
    other = Arena.attach(arena.name)
    try:
        seen = other.view(block)
        assert np.frombuffer(seen, dtype=np.uint8)[:256].tolist() == list(range(256))
        seen.release()
        other.release(block)  # any process may release
    finally:
        other.close()
    assert arena.free_slots() == 16


def test_full_arena_returns_none_and_runs_need_consecutive_slots(arena: Arena) -> None:
    blocks = [arena.allocate(128, holder=1) for _ in range(16)]
    assert all(b is not None for b in blocks)
    assert arena.allocate(1, holder=1) is None
    for block in blocks[::2]:  # every other slot free: no run of two
        assert block is not None
        arena.release(block)
    assert arena.free_slots() == 8
    assert arena.allocate(129, holder=1) is None
    single = arena.allocate(128, holder=1)
    assert single is not None
    assert single.count == 1
    released = blocks[1]
    assert released is not None
    arena.release(released)  # slots 1 and 2 are now a free run
    run = arena.allocate(256, holder=2)
    assert run is not None
    assert (run.first, run.count) == (1, 2)
    assert [arena.held_by(1), arena.held_by(2)] == [8, 2]


def test_sizes_and_holders_are_checked(arena: Arena) -> None:
    with pytest.raises(ValueError, match="exceed the arena"):
        arena.allocate(16 * 128 + 1, holder=1)
    with pytest.raises(ValueError, match="positive"):
        arena.allocate(1, holder=0)
    block = arena.allocate(1, holder=3)
    assert block is not None
    arena.release(block)
    with pytest.raises(ArenaError, match="not held"):
        arena.release(block)  # twice
    forged = Block(block.first, 1, block.offset, 1, holder=4)
    arena.allocate(1, holder=3)
    with pytest.raises(ArenaError, match="not held"):
        arena.release(forged)


def test_reclaim_frees_one_holder_only(arena: Arena) -> None:
    for holder in (1, 2, 1, 1):
        assert arena.allocate(200, holder) is not None
    assert arena.reclaim(1) == 6
    assert arena.held_by(2) == 2
    assert arena.reclaim(None) == 2
    assert arena.free_slots() == 16


def test_a_segment_that_is_not_an_arena_is_refused() -> None:
    segment = Segment.create(None, 4096)
    try:
        with pytest.raises(ArenaError, match="not an inferd arena"):
            Arena.attach(segment.name)
    finally:
        segment.close()
        segment.unlink()


def _stream_blocks(
    arena_name: str, ring_name: str, holder: int, bell: Doorbell, full: Doorbell
) -> None:
    """Allocate blocks, fill them, and send them on the ring until killed."""
    arena = Arena.attach(arena_name)
    ring = Ring.attach(ring_name)
    seq = 0
    while True:
        block = arena.allocate(64 + seq % 300, holder)
        if block is None:
            full.ring()  # out of slots: tell the test, which kills us now
            continue
        view = arena.view(block)
        view[:] = bytes([seq % 256]) * block.nbytes
        view.release()
        descriptor = BLOCK.pack(block.first, block.count, block.offset, block.nbytes, holder)
        while (put := ring.offer(descriptor)) is Put.FULL:
            pass
        if put is Put.WAKE:
            bell.ring()
        seq += 1


def test_a_producer_killed_mid_stream_leaks_no_slots() -> None:
    arena = Arena.create(None, 64, 128)
    ring = Ring.create(None, 128, BLOCK.size)  # more slots than the arena
    bell, full = Doorbell(), Doorbell()
    holder = 7
    mine = arena.allocate(10, holder=1)  # the consumer's own block survives the reclaim
    child = SPAWN.Process(target=_stream_blocks, args=(arena.name, ring.name, holder, bell, full))
    child.start()
    try:
        checked = 0
        while checked < 200:  # consume some, releasing what we read
            if ring.prepare_to_sleep():  # empty: sleep until the producer rings
                assert bell.wait(timeout_s=60), "producer sent nothing"  # slow to spawn
                bell.drain()
            ring.awake()
            while (data := ring.try_get()) is not None:
                first, count, offset, nbytes, who = BLOCK.unpack(data)
                block = Block(first, count, offset, nbytes, who)
                view = arena.view(block)
                assert set(view.tobytes()) == {checked % 256}
                view.release()
                arena.release(block)
                checked += 1
        # stop reading: the producer fills the arena until an allocation fails. It rings
        # `full` on every failed try; the second ring seen after this drain comes from a try
        # made after our last release.
        full.drain()
        for _ in range(2):
            assert full.wait(timeout_s=30), "producer stopped"
            full.drain()
        os.kill(child.pid or 0, signal.SIGKILL)
        child.join(timeout=30)
        assert child.exitcode == -signal.SIGKILL
        held = arena.held_by(holder)
        assert held == 63 - arena.free_slots() > 0  # runs of up to 3 slots: some may stay free
        assert arena.reclaim(holder) == held
        assert arena.held_by(holder) == 0
        assert arena.free_slots() == 63
        assert mine is not None
        assert arena.held_by(1) == 1
    finally:
        if child.is_alive():
            child.kill()
            child.join()
        bell.close()
        full.close()
        ring.close()
        ring.unlink()
        arena.close()
        arena.unlink()


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(
    steps=st.lists(st.one_of(st.integers(1, 600), st.integers(-40, -1)), max_size=60),
)
def test_live_blocks_never_overlap(steps: list[int]) -> None:
    """Allocations (a size) and releases (an index into the live blocks) in any order: live
    blocks never share a slot, each keeps its bytes, and the free count adds up."""
    arena = Arena.create(None, 12, 128)
    live: list[tuple[Block, int]] = []
    try:
        for i, step in enumerate(steps):
            if step > 0:
                block = arena.allocate(step, holder=1 + i % 3)
                if block is None:
                    continue
                view = arena.view(block)
                view[:] = bytes([i % 256]) * step
                view.release()
                live.append((block, i % 256))
            elif live:
                block, _ = live.pop(-step % len(live))
                arena.release(block)
            taken = [s for b, _ in live for s in range(b.first, b.first + b.count)]
            assert len(taken) == len(set(taken))
            assert arena.free_slots() == arena.slots - len(taken)
            for block, fill in live:
                view = arena.view(block)
                assert view.tobytes() == bytes([fill]) * block.nbytes
                view.release()
    finally:
        arena.close()
        arena.unlink()
