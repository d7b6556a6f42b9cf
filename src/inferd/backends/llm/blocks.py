"""KV cache block accounting: which fixed-size blocks of the cache are free, held or cached.

The KV cache is cut into ``total_blocks`` blocks of ``block_tokens`` tokens each; a sequence
holds ``blocks_for(its tokens)`` of them. :class:`BlockAllocator` only counts and hands out block
ids; the tensors live in the runtime. It is thread-confined (the engine thread owns it) and
keeps no locks. Every misuse is refused loudly before any state changes: allocating more than is
free, freeing an id that is not held (a double free), an id out of range or the same id twice
in one call.

**Prefix caching** (``caching=True``, as vLLM's automatic prefix caching does it): a *full*
block can be registered under a key, :func:`block_key` of its parent block's key and its own
token ids, so one key names one whole token prefix. Blocks are reference-counted: a sequence
whose prompt starts with cached blocks :meth:`~BlockAllocator.acquire` s them (``+1``) instead of
computing them again. A registered block whose last holder frees it stays cached (reference
count 0, in a least-recently-used order of evictable blocks) instead of going back to the free
list; :meth:`~BlockAllocator.allocate` takes never-cached free blocks first, then evicts the
least recently used cached ones. Evictable blocks count as free: ``free_count + used_count`` is
always ``total``. Only full blocks are registered, and a block is written only by a sequence
that holds it alone and has not registered it (its partially filled last block), so a shared
block is never written.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from inferd.errors import InternalError


class BlockAccountingError(InternalError):
    """The KV block accounting was misused (short allocation, double free, unknown id)."""


def blocks_for(tokens: int, block_tokens: int) -> int:
    """How many blocks of ``block_tokens`` tokens hold ``tokens`` tokens (rounded up)."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be at least 1, got {block_tokens}")
    if tokens < 0:
        raise ValueError(f"tokens must not be negative, got {tokens}")
    return -(-tokens // block_tokens)


def block_key(parent: bytes | None, tokens: Sequence[int]) -> bytes:
    """The key of a full block: a 128-bit BLAKE2b digest of its parent block's key (``None``
    for a sequence's first block) and its token ids, so equal keys mean equal prefixes."""
    digest = hashlib.blake2b(parent or b"\0", digest_size=16)
    digest.update(array("q", tokens).tobytes())
    return digest.digest()


def extend_keys(keys: list[bytes], tokens: Sequence[int], block_tokens: int, upto: int) -> None:
    """Append to ``keys`` (the keys of the first ``len(keys)`` full blocks of ``tokens``) those
    of the following full blocks, until ``upto`` blocks have keys (or the full blocks end)."""
    upto = min(upto, len(tokens) // block_tokens)
    for index in range(len(keys), upto):
        parent = keys[index - 1] if index else None
        keys.append(block_key(parent, tokens[index * block_tokens : (index + 1) * block_tokens]))


class BlockAllocator:
    """Hands out ids ``0 .. total_blocks - 1``; the most recently freed id is reused first.

    With ``caching``, freed registered blocks stay cached (evictable) until allocation needs
    them; see the module docstring."""

    __slots__ = ("_by_key", "_caching", "_evictable", "_free", "_key_of", "_refs", "_total")

    def __init__(self, total_blocks: int, *, caching: bool = False) -> None:
        if total_blocks < 1:
            raise ValueError(f"total_blocks must be at least 1, got {total_blocks}")
        self._total = total_blocks
        self._caching = caching
        # a stack: pop() takes the lowest ids first on a fresh allocator
        self._free: list[int] = list(range(total_blocks - 1, -1, -1))
        self._refs = [0] * total_blocks
        self._key_of: dict[int, bytes] = {}
        self._by_key: dict[bytes, int] = {}
        # cached blocks nobody holds, least recently used first
        self._evictable: OrderedDict[int, None] = OrderedDict()

    @property
    def total(self) -> int:
        return self._total

    @property
    def caching(self) -> bool:
        return self._caching

    @property
    def free_count(self) -> int:
        """Blocks an allocation may take: never-cached free ones plus evictable cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def used_count(self) -> int:
        """Blocks held by at least one sequence."""
        return self._total - self.free_count

    @property
    def cached_count(self) -> int:
        """Registered blocks, held or evictable."""
        return len(self._key_of)

    def refs(self, block: int) -> int:
        """How many sequences hold ``block``."""
        return self._refs[block]

    def key_of(self, block: int) -> bytes | None:
        """The key ``block`` is registered under, or None."""
        return self._key_of.get(block)

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` blocks, free ones first, then the least recently used cached ones (their
        keys forgotten); raises :class:`BlockAccountingError` (taking none) when short."""
        if n < 0:
            raise ValueError(f"cannot allocate a negative number of KV blocks ({n})")
        if n > self.free_count:
            raise BlockAccountingError(
                f"cannot allocate {n} KV blocks: only {self.free_count} of {self._total} are free"
            )
        ids: list[int] = []
        for _ in range(n):
            if self._free:
                block = self._free.pop()
            else:
                block, _ = self._evictable.popitem(last=False)
                del self._by_key[self._key_of.pop(block)]
            self._refs[block] = 1
            ids.append(block)
        return ids

    def free(self, ids: Iterable[int]) -> None:
        """Drop one hold on each block; every id must be held and appear once, else nothing is
        freed. A block nobody holds any more returns to the free list, or, when registered,
        becomes evictable (the batch's last block the first to be evicted)."""
        batch = list(ids)
        seen: set[int] = set()
        for block in batch:
            if not 0 <= block < self._total:
                raise BlockAccountingError(
                    f"KV block {block} does not exist (ids are 0..{self._total - 1})"
                )
            if block in seen:
                raise BlockAccountingError(f"KV block {block} appears twice in one free()")
            if self._refs[block] < 1:
                raise BlockAccountingError(f"KV block {block} is not allocated (double free?)")
            seen.add(block)
        # freed in reverse so that the first id of the batch is the next one handed out (and,
        # cached, the last one evicted: a prompt's head is the likeliest to be shared)
        for block in reversed(batch):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                if block in self._key_of:
                    self._evictable[block] = None
                else:
                    self._free.append(block)

    def register(self, block: int, key: bytes) -> bool:
        """Cache the full, held ``block`` under ``key``; False (nothing changes) when caching is
        off, the block is already registered or another block holds that key."""
        if not 0 <= block < self._total or self._refs[block] < 1:
            raise BlockAccountingError(f"KV block {block} is not allocated; cannot register it")
        if not self._caching or block in self._key_of or key in self._by_key:
            return False
        self._key_of[block] = key
        self._by_key[key] = block
        return True

    def match(self, keys: Iterable[bytes]) -> list[int]:
        """The cached blocks of the longest run of ``keys`` from the first (a prompt's head)."""
        found: list[int] = []
        for key in keys:
            block = self._by_key.get(key)
            if block is None:
                break
            found.append(block)
        return found

    def acquire(self, ids: Sequence[int]) -> None:
        """Hold the cached blocks ``ids`` once more (an evictable one stops being evictable)."""
        for block in ids:
            if block not in self._key_of:
                raise BlockAccountingError(f"KV block {block} is not cached; cannot share it")
        for block in ids:
            if self._refs[block] == 0:
                del self._evictable[block]
            self._refs[block] += 1

    def __repr__(self) -> str:
        return (
            f"BlockAllocator(total={self._total}, free={len(self._free)}, "
            f"evictable={len(self._evictable)}, cached={len(self._key_of)})"
        )
