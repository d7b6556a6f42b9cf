"""KV cache block accounting: which fixed-size blocks of the cache are free and which are held.

The KV cache is cut into ``total_blocks`` blocks of ``block_tokens`` tokens each; a sequence
holds ``blocks_for(its tokens)`` of them. :class:`BlockAllocator` only counts and hands out block
ids; the tensors live in the runtime. It is thread-confined (the engine thread owns it) and
keeps no locks. Every misuse is refused loudly before any state changes: allocating more than is
free, freeing an id that is not allocated (a double free), an id out of range or the same id
twice in one call.
"""

from __future__ import annotations

from collections.abc import Iterable

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


class BlockAllocator:
    """Hands out ids ``0 .. total_blocks - 1``; the most recently freed id is reused first."""

    __slots__ = ("_free", "_total", "_used")

    def __init__(self, total_blocks: int) -> None:
        if total_blocks < 1:
            raise ValueError(f"total_blocks must be at least 1, got {total_blocks}")
        self._total = total_blocks
        # a stack: pop() takes the lowest ids first on a fresh allocator
        self._free: list[int] = list(range(total_blocks - 1, -1, -1))
        self._used: set[int] = set()

    @property
    def total(self) -> int:
        return self._total

    @property
    def free_count(self) -> int:
        return len(self._free)

    @property
    def used_count(self) -> int:
        return len(self._used)

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` free blocks; raises :class:`BlockAccountingError` (taking none) when short."""
        if n < 0:
            raise ValueError(f"cannot allocate a negative number of KV blocks ({n})")
        if n > len(self._free):
            raise BlockAccountingError(
                f"cannot allocate {n} KV blocks: only {len(self._free)} of {self._total} are free"
            )
        ids = [self._free.pop() for _ in range(n)]
        self._used.update(ids)
        return ids

    def free(self, ids: Iterable[int]) -> None:
        """Return blocks; every id must be allocated and appear once, else nothing is freed."""
        batch = list(ids)
        seen: set[int] = set()
        for block in batch:
            if not 0 <= block < self._total:
                raise BlockAccountingError(
                    f"KV block {block} does not exist (ids are 0..{self._total - 1})"
                )
            if block in seen:
                raise BlockAccountingError(f"KV block {block} appears twice in one free()")
            if block not in self._used:
                raise BlockAccountingError(f"KV block {block} is not allocated (double free?)")
            seen.add(block)
        self._used.difference_update(batch)
        # freed in reverse so that the first id of the batch is the next one handed out
        self._free.extend(reversed(batch))

    def __repr__(self) -> str:
        return f"BlockAllocator(total={self._total}, free={len(self._free)})"
