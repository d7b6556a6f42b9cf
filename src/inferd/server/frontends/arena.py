"""A shared-memory arena of fixed-size slots for tensor bytes, with a holder per slot.

Descriptors on a ring stay small; the tensors they describe live here, and a descriptor names
them by :class:`Block` (first slot, slot count, byte offset, length). A block is a run of
consecutive slots, so a tensor is one contiguous ``memoryview`` — decoded straight into, and
read in place with ``np.frombuffer``.

Layout (little-endian signed 64-bit words)::

    0     magic, version, slots, slot_bytes, data_offset   geometry, written once by create()
    64    state[0 .. slots)   0 = free, else the holder that allocated the slot
    data_offset (a multiple of 64)   slot 0, slot 1, ... each slot_bytes long (a multiple of 64)

Who writes what. Exactly one process allocates from an arena (the one that fills it: a front
end for requests, the engine for replies): it finds a run of free states and stores its holder
id into them before writing the bytes. Any process that received a block may release it,
after it has read the bytes, by storing 0 into its states. A state word is 8-byte aligned and
stored in one move, so the allocator reads either the holder or 0, never a mix; the allocator is
the only process turning 0 into non-zero, so no two blocks ever share a slot. On x86-64 loads
are not reordered after later stores, so a releaser's reads of the bytes happen before its
release; elsewhere a fence precedes the release (see :mod:`.shared`).

Dying holders. A front end that is killed leaves its slots marked with its holder id. Once the
engine has stopped using the dead front end's descriptors it calls :meth:`Arena.reclaim` with
that holder and every slot it held is free again; ``reclaim(None)`` frees everything (for an
arena whose allocator is gone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .shared import NEEDS_PUBLISH_FENCE, Fence, Segment, attach_view

MAGIC = 0x414E455241444649  # b"IFDARENA" little-endian
VERSION = 1
_LINE = 64
_MAGIC, _VERSION, _SLOTS, _SLOT_BYTES, _DATA = 0, 1, 2, 3, 4
_STATES_AT = 64


class ArenaError(RuntimeError):
    """A segment that is not an arena, or a block released twice or by the wrong holder."""


@dataclass(frozen=True, slots=True)
class Block:
    """Where one allocation lives: ``nbytes`` bytes at ``offset``, slots ``first..first+count``."""

    first: int
    count: int
    offset: int
    nbytes: int
    holder: int


class Arena:
    """Fixed-size slots in a named segment (see the module docstring)."""

    def __init__(self, segment: Segment) -> None:
        self._segment = segment
        words = segment.buffer[:_STATES_AT].cast("q")
        try:
            if words[_MAGIC] != MAGIC or words[_VERSION] != VERSION:
                raise ArenaError(f"segment {segment.name!r} is not an inferd arena")
            self.slots: int = words[_SLOTS]
            self.slot_bytes: int = words[_SLOT_BYTES]
            self._data: int = words[_DATA]
        finally:
            words.release()
        self._states: np.ndarray[Any, np.dtype[np.int64]] = np.frombuffer(
            segment.buffer, dtype="<i8", count=self.slots, offset=_STATES_AT
        )
        self._cursor = 0
        self._fence = Fence()

    @property
    def name(self) -> str:
        return self._segment.name

    @classmethod
    def create(cls, name: str | None, slots: int, slot_bytes: int) -> Arena:
        if slots < 1 or slot_bytes < 1:
            raise ValueError(
                f"an arena needs slots >= 1 and slot_bytes >= 1, got {slots}, {slot_bytes}"
            )
        slot_bytes = (slot_bytes + _LINE - 1) // _LINE * _LINE
        data = (_STATES_AT + 8 * slots + _LINE - 1) // _LINE * _LINE
        segment = Segment.create(name, data + slots * slot_bytes)
        words = segment.buffer[:_STATES_AT].cast("q")
        words[_SLOTS], words[_SLOT_BYTES], words[_DATA] = slots, slot_bytes, data
        words[_VERSION] = VERSION
        words[_MAGIC] = MAGIC
        words.release()
        return cls(segment)

    @classmethod
    def attach(cls, name: str) -> Arena:
        return attach_view(name, cls)

    # -- the allocating process -------------------------------------------------------------

    def allocate(self, nbytes: int, holder: int) -> Block | None:
        """Reserve a run of slots for ``nbytes`` bytes; None while no such run is free.

        Raises :class:`ValueError` for a size the whole arena could never hold.
        """
        if holder <= 0:
            raise ValueError(f"holder ids are positive, got {holder}")
        count = max(1, -(-nbytes // self.slot_bytes))
        if count > self.slots:
            raise ValueError(
                f"{nbytes} bytes exceed the arena ({self.slots} slots of {self.slot_bytes} bytes)"
            )
        states = self._states
        cursor = self._cursor
        if count == 1 and cursor < self.slots and states[cursor] == 0:
            first = cursor
        else:
            first = self._find_run(count)
            if first < 0:
                return None
        states[first : first + count] = holder
        self._cursor = (first + count) % self.slots
        offset = self._data + first * self.slot_bytes
        return Block(first, count, offset, nbytes, holder)

    def _find_run(self, count: int) -> int:
        free = self._states == 0
        if count == 1:
            found = np.flatnonzero(free)
        else:
            sums = np.concatenate(([0], np.cumsum(free, dtype=np.int64)))
            found = np.flatnonzero(sums[count:] - sums[:-count] == count)
        if found.size == 0:
            return -1
        after = found[found >= self._cursor]
        return int(after[0] if after.size else found[0])

    # -- any process --------------------------------------------------------------------------

    def block(self, first: int, count: int, nbytes: int, holder: int) -> Block:
        """The block of slots ``first..first+count`` holding ``nbytes`` bytes, as another
        process names it (checked against this arena's geometry; ArenaError if outside)."""
        inside = first >= 0 and count > 0 and first + count <= self.slots
        if not inside or not 0 <= nbytes <= count * self.slot_bytes:
            raise ArenaError(
                f"no block of {count} slots from slot {first} holding {nbytes} bytes in an "
                f"arena of {self.slots} slots of {self.slot_bytes} bytes"
            )
        return Block(first, count, self._data + first * self.slot_bytes, nbytes, holder)

    def view(self, block: Block) -> memoryview:
        """The block's bytes, writable, without a copy (release the view before close())."""
        return self._segment.buffer[block.offset : block.offset + block.nbytes]

    def release(self, block: Block) -> None:
        """Free a block once its bytes have been read."""
        states = self._states[block.first : block.first + block.count]
        if (
            block.count < 1
            or block.first + block.count > self.slots
            or (states != block.holder).any()
        ):
            raise ArenaError(f"block {block} is not held by holder {block.holder}")
        if NEEDS_PUBLISH_FENCE:
            self._fence()
        states[:] = 0

    def reclaim(self, holder: int | None) -> int:
        """Free every slot ``holder`` holds (every slot for None); return how many."""
        states = self._states
        held = states != 0 if holder is None else states == holder
        freed = int(held.sum())
        states[held] = 0
        return freed

    def free_slots(self) -> int:
        return int((self._states == 0).sum())

    def held_by(self, holder: int) -> int:
        return int((self._states == holder).sum())

    def close(self) -> None:
        del self._states
        self._segment.close()

    def unlink(self) -> None:
        self._segment.unlink()
