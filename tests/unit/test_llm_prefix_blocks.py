"""Prefix caching in the KV block accounting: keys, sharing, eviction, and a property test that
drives the allocator as the engine does (admit with the cached head, write, register full
blocks, free) and checks the invariants after every operation."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.backends.llm.blocks import (
    BlockAccountingError,
    BlockAllocator,
    block_key,
    blocks_for,
    extend_keys,
)


def _keys(tokens: list[int], bt: int) -> list[bytes]:
    keys: list[bytes] = []
    extend_keys(keys, tokens, bt, len(tokens) // bt)
    return keys


def test_keys_name_whole_prefixes() -> None:
    a = _keys([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    assert len(a) == 2  # the partial last block has no key
    assert a == _keys([1, 2, 3, 4, 5, 6, 7, 8], 4)
    # the same second block after another first block is another prefix
    b = _keys([9, 9, 9, 9, 5, 6, 7, 8], 4)
    assert a[0] != b[0]
    assert a[1] != b[1]
    assert a[0] == block_key(None, [1, 2, 3, 4])
    assert a[1] == block_key(a[0], [5, 6, 7, 8])
    keys = a[:1]
    extend_keys(keys, [1, 2, 3, 4, 5, 6, 7, 8], 4, upto=1)
    assert keys == a[:1]


def test_freed_registered_blocks_stay_cached_until_evicted() -> None:
    alloc = BlockAllocator(4, caching=True)
    keys = _keys(list(range(8)), 4)
    held = alloc.allocate(3)
    assert alloc.register(held[0], keys[0])
    assert alloc.register(held[1], keys[1])
    assert not alloc.register(held[2], keys[0])  # another block holds that key: stays private
    alloc.free(held)
    assert (alloc.free_count, alloc.used_count, alloc.cached_count) == (4, 0, 2)
    assert alloc.match([*keys, b"x"]) == held[:2]
    # a new sequence shares the cached head
    alloc.acquire(held[:2])
    assert (alloc.refs(held[0]), alloc.free_count, alloc.used_count) == (1, 2, 2)
    alloc.acquire(held[:1])  # and a second one shares the first block
    assert alloc.refs(held[0]) == 2
    alloc.free(held[:1])
    alloc.free(held[:2])
    # allocation takes the never-cached free blocks first, then evicts the least recently used
    # cached block: the tail of the last sequence freed before its head
    fresh = alloc.allocate(2)
    assert held[0] not in fresh
    assert held[1] not in fresh
    assert alloc.cached_count == 2
    evicted = alloc.allocate(1)
    assert evicted == [held[1]]
    assert alloc.key_of(held[1]) is None
    assert alloc.match(keys) == [held[0]]
    assert alloc.free_count == 1


def test_caching_off_registers_nothing_and_misuse_is_refused() -> None:
    plain = BlockAllocator(2)
    block = plain.allocate(1)[0]
    assert not plain.register(block, b"k")
    plain.free([block])
    assert plain.match([b"k"]) == []
    assert plain.free_count == 2
    alloc = BlockAllocator(2, caching=True)
    with pytest.raises(BlockAccountingError, match="not allocated; cannot register"):
        alloc.register(0, b"k")
    block = alloc.allocate(1)[0]
    with pytest.raises(BlockAccountingError, match="not cached; cannot share"):
        alloc.acquire([block])
    alloc.free([block])
    with pytest.raises(BlockAccountingError, match="not allocated"):
        alloc.free([block])


@dataclass
class _Seq:
    tokens: list[int]
    blocks: list[int] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    registered: int = 0
    written: int = 0  # tokens whose KV is in the cache


class _Sim:
    """The engine's use of the allocator, with the cache's contents simulated: ``content[b]``
    is the token prefix whose KV block ``b`` holds once full (KV depends on the whole prefix)."""

    def __init__(self, total: int, bt: int) -> None:
        self.alloc = BlockAllocator(total, caching=True)
        self.bt = bt
        self.total = total
        self.seqs: list[_Seq] = []
        self.content: dict[int, tuple[int, ...]] = {}
        self.hit_tokens = 0

    def _take(self, n: int) -> list[int]:
        ids = self.alloc.allocate(n)
        held = {b for s in self.seqs for b in s.blocks}
        assert not held & set(ids), "a held block was handed out again"
        for block in ids:
            self.content.pop(block, None)
        return ids

    def _write(self, seq: _Seq, upto: int) -> None:
        """Compute KV for positions ``seq.written .. upto - 1``; register the full blocks."""
        for pos in range(seq.written, upto):
            block = seq.blocks[pos // self.bt]
            assert self.alloc.refs(block) == 1, "a shared block was written"
            assert self.alloc.key_of(block) is None, "a cached block was written"
            if pos % self.bt == self.bt - 1:
                self.content[block] = tuple(seq.tokens[: pos + 1])
        seq.written = upto
        full = upto // self.bt
        extend_keys(seq.keys, seq.tokens, self.bt, full)
        for index in range(seq.registered, full):
            self.alloc.register(seq.blocks[index], seq.keys[index])
        seq.registered = max(seq.registered, full)

    def admit(self, tokens: list[int]) -> None:
        seq = _Seq(list(tokens))
        usable = (len(tokens) - 1) // self.bt
        extend_keys(seq.keys, seq.tokens, self.bt, usable)
        found = self.alloc.match(seq.keys[:usable])
        for index, block in enumerate(found):  # a hit is the very same prefix
            assert self.content[block] == tuple(tokens[: (index + 1) * self.bt])
        need = blocks_for(len(tokens), self.bt)
        if need > self.alloc.free_count:  # the conservative cost the policy plans with
            return
        self.alloc.acquire(found)
        seq.blocks = list(found)
        seq.registered = len(found)
        seq.written = len(found) * self.bt
        self.hit_tokens += seq.written
        seq.blocks += self._take(need - len(found))
        self.seqs.append(seq)
        self._write(seq, len(tokens))

    def decode(self, index: int, token: int) -> None:
        seq = self.seqs[index]
        if blocks_for(seq.written + 1, self.bt) > len(seq.blocks):
            if self.alloc.free_count < 1:
                return
            seq.blocks += self._take(1)
        seq.tokens.append(token)
        self._write(seq, seq.written + 1)

    def release(self, index: int) -> None:
        seq = self.seqs.pop(index)
        self.alloc.free(seq.blocks)

    def check(self) -> None:
        holders: dict[int, int] = {}
        for seq in self.seqs:
            assert len(set(seq.blocks)) == len(seq.blocks)
            for block in seq.blocks:
                holders[block] = holders.get(block, 0) + 1
        for block in range(self.total):
            assert self.alloc.refs(block) == holders.get(block, 0) >= 0
        assert self.alloc.used_count == len(holders) <= self.total
        assert self.alloc.free_count + self.alloc.used_count == self.total
        assert self.alloc.cached_count <= self.total


_HEADS = ([1] * 9, [1] * 5 + [2] * 4, [3, 4, 5, 6, 7, 8, 9, 10])


@settings(max_examples=150, deadline=None)
@given(
    total=st.integers(2, 24),
    bt=st.integers(1, 4),
    ops=st.lists(
        st.tuples(st.sampled_from("aadr"), st.integers(0, 99), st.integers(0, 5)),
        max_size=60,
    ),
)
def test_prefix_cache_keeps_the_accounting_exact(
    total: int, bt: int, ops: list[tuple[str, int, int]]
) -> None:
    sim = _Sim(total, bt)
    for op, pick, length in ops:
        if op == "a":
            head = _HEADS[pick % len(_HEADS)][: 1 + pick % 9]
            sim.admit([*head, *range(20, 20 + length)])
        elif op == "d" and sim.seqs:
            sim.decode(pick % len(sim.seqs), 30 + length)
        elif op == "r" and sim.seqs:
            sim.release(pick % len(sim.seqs))
        sim.check()
    while sim.seqs:
        sim.release(0)
        sim.check()
    assert sim.alloc.free_count == total


def test_a_shared_head_is_computed_once() -> None:
    sim = _Sim(16, 4)
    head = list(range(1, 13))
    sim.admit([*head, 40])
    sim.admit([*head, 41, 42])
    assert sim.hit_tokens == 12
    sim.release(0)
    sim.release(0)
    sim.admit([*head, 43])  # cached after both finished
    assert sim.hit_tokens == 24
    sim.check()


def test_the_policy_counts_only_a_victims_own_blocks_as_freed() -> None:
    from inferd.backends.llm.policy import PolicyConfig, SeqState, plan_step

    cfg = PolicyConfig(
        max_running=4, max_step_tokens=16, block_tokens=4, total_blocks=6, max_model_len=64
    )

    def running(seq_id: int, shared: int) -> SeqState:
        # 8 tokens computed in 2 full blocks: the next token needs a third block
        return SeqState(seq_id, float(seq_id), 8, 8, 1, 8, blocks=2, shared_blocks=shared)

    # no free block: the oldest needs one, the youngest is preempted; when the youngest's
    # blocks are all shared with the oldest, preempting it frees nothing, so the next one
    # goes too
    alone = plan_step([], [running(0, 0), running(1, 0), running(2, 0)], 0, cfg)
    assert alone.preempt == (2,)
    shared = plan_step([], [running(0, 0), running(1, 0), running(2, 2)], 0, cfg)
    assert shared.preempt == (2, 1)
    with pytest.raises(ValueError, match=r"shared_blocks must be 0\.\.blocks"):
        SeqState(9, 0.0, 8, 8, 1, 8, blocks=1, shared_blocks=2)


def test_the_policy_admits_a_cached_head_with_a_grant_for_every_block() -> None:
    from inferd.backends.llm.policy import PolicyConfig, SeqState, plan_step

    cfg = PolicyConfig(
        max_running=4, max_step_tokens=16, block_tokens=4, total_blocks=8, max_model_len=64
    )
    # 10 prompt tokens, 8 of them cached (2 blocks): it prefills the last 2 tokens, and its
    # grant covers all 3 blocks (the runtime takes the 2 cached ones as part of it)
    hit = SeqState(0, 0.0, 10, 8, 0, 4, blocks=0)
    plan = plan_step([hit], [], 3, cfg)
    assert plan.prefill == ((0, 2),)
    assert plan.grow == ((0, 3),)
    # with fewer free blocks than the whole grant, it waits (never over-committed)
    assert plan_step([hit], [], 2, cfg).prefill == ()
