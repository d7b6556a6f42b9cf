"""KV block accounting: ceilings, allocation, and every misuse refused before state changes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.backends.llm.blocks import BlockAccountingError, BlockAllocator, blocks_for
from inferd.errors import ErrorCode


@pytest.mark.parametrize(
    ("tokens", "block_tokens", "blocks"),
    [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2), (32, 16, 2), (33, 16, 3), (5, 1, 5)],
)
def test_blocks_for_rounds_up(tokens: int, block_tokens: int, blocks: int) -> None:
    assert blocks_for(tokens, block_tokens) == blocks


def test_blocks_for_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="block_tokens must be at least 1"):
        blocks_for(4, 0)
    with pytest.raises(ValueError, match="tokens must not be negative"):
        blocks_for(-1, 4)


def test_allocate_and_free_count_blocks() -> None:
    alloc = BlockAllocator(8)
    assert (alloc.total, alloc.free_count, alloc.used_count) == (8, 8, 0)
    first = alloc.allocate(3)
    assert len(set(first)) == 3
    assert all(0 <= b < 8 for b in first)
    assert (alloc.free_count, alloc.used_count) == (5, 3)
    rest = alloc.allocate(5)
    assert set(first) | set(rest) == set(range(8))
    assert alloc.allocate(0) == []
    alloc.free(first)
    assert (alloc.free_count, alloc.used_count) == (3, 5)
    assert sorted(alloc.allocate(3)) == sorted(first)  # freed ids come back


def test_allocate_beyond_free_is_refused_and_takes_nothing() -> None:
    alloc = BlockAllocator(4)
    alloc.allocate(3)
    with pytest.raises(BlockAccountingError, match=r"cannot allocate 2 KV blocks: only 1 of 4"):
        alloc.allocate(2)
    assert (alloc.free_count, alloc.used_count) == (1, 3)
    with pytest.raises(ValueError, match="negative"):
        alloc.allocate(-1)


def test_double_free_is_refused() -> None:
    alloc = BlockAllocator(4)
    ids = alloc.allocate(2)
    alloc.free(ids[:1])
    with pytest.raises(BlockAccountingError, match=rf"KV block {ids[0]} is not allocated"):
        alloc.free(ids)
    # the refused call freed nothing, not even the valid id in it
    assert (alloc.free_count, alloc.used_count) == (3, 1)
    alloc.free(ids[1:])
    assert alloc.free_count == 4


def test_free_refuses_unknown_and_repeated_ids_atomically() -> None:
    alloc = BlockAllocator(4)
    ids = alloc.allocate(2)
    with pytest.raises(BlockAccountingError, match=r"KV block 9 does not exist \(ids are 0..3\)"):
        alloc.free([ids[0], 9])
    with pytest.raises(BlockAccountingError, match="appears twice"):
        alloc.free([ids[0], ids[0]])
    assert alloc.used_count == 2
    never = next(b for b in range(4) if b not in ids)
    with pytest.raises(BlockAccountingError, match="not allocated"):
        alloc.free([never])


def test_accounting_errors_are_internal_errors() -> None:
    assert BlockAccountingError("x").code is ErrorCode.INTERNAL
    with pytest.raises(ValueError, match="total_blocks must be at least 1"):
        BlockAllocator(0)


@given(st.integers(1, 32), st.lists(st.tuples(st.booleans(), st.integers(0, 8)), max_size=60))
@settings(max_examples=200)
def test_random_use_never_loses_or_duplicates_a_block(
    total: int, ops: list[tuple[bool, int]]
) -> None:
    alloc = BlockAllocator(total)
    held: list[list[int]] = []
    for take, n in ops:
        if take:
            if n > alloc.free_count:
                with pytest.raises(BlockAccountingError):
                    alloc.allocate(n)
            else:
                held.append(alloc.allocate(n))
        elif held:
            alloc.free(held.pop(n % len(held)))
        owned = [b for group in held for b in group]
        assert len(owned) == len(set(owned)) == alloc.used_count
        assert alloc.free_count + alloc.used_count == total
    for group in held:
        alloc.free(group)
    assert alloc.free_count == total
