"""A single-producer, single-consumer ring of fixed-size descriptor slots in shared memory.

One ring carries descriptors one way between two processes: exactly one producer (one thread
of one process at a time) calls :meth:`Ring.try_put`, exactly one consumer calls
:meth:`Ring.try_get`. Either side may be the creator; the creator unlinks the segment.

Layout (all integers little-endian signed 64-bit, every counter on its own 64-byte line)::

    0    magic, version, slots, slot_bytes, stride          geometry, written once by create()
    64   tail          slots published so far               written by the producer only
    72   space_wait    > 0 while the producer waits for     written by the producer only
                       room (an epoch number)
    128  head          slots consumed so far                written by the consumer only
    136  sleeping      > 0 while the consumer sleeps (an    written by the consumer only
                       epoch number), minus it once awake
    192  slot 0: length (8 bytes), payload (<= slot_bytes), padded to stride (a multiple of 64)
         slot 1 ...

``tail`` and ``head`` only grow; slot ``i`` of the stream lives at index ``i % slots``. The ring
is empty when ``head == tail`` and full when ``tail - head == slots``.

Memory ordering (see :mod:`.shared`): the producer writes the payload and its length, then
stores ``tail``; the consumer loads ``tail``, copies the payload out, then stores ``head``. One
writer per counter, aligned 8-byte stores, stores in program order: a consumer that sees a
``tail`` sees the payloads before it, and a producer that sees a ``head`` may reuse the slots
before it.

Waking (an eventcount). A consumer takes everything there is, and only then goes to sleep on a
doorbell: :meth:`Ring.prepare_to_sleep` stores a new epoch into ``sleeping``, issues a full
fence and loads ``tail`` once more; only if the ring is still empty does the consumer sleep
(else it negates ``sleeping`` and reads on). The producer, after storing ``tail``, fences and
loads ``sleeping``: a non-zero epoch it has not rung for yet means the consumer sleeps or is
about to, and :meth:`Ring.offer` answers :data:`Put.WAKE` (once per epoch: the puts that follow
while the consumer still sleeps answer :data:`Put.QUEUED`). Of the two store→fence→load
sequences at least one sees the other's store (Dekker), so either the consumer sees the new
slot or the producer sees the epoch and rings: no lost wake-up. A consumer that is awake —
busy, or behind — costs its producer no doorbell at all, however often the ring runs empty
between puts; a consumer that sleeps gets one ring, however many puts arrive before it wakes.
A woken consumer negates its epoch (:meth:`Ring.awake`) before it reads again; epochs only
grow, also across a consumer that attaches again, so no epoch is ever rung for twice.
The same argument, the other way, covers a producer waiting for room: it raises ``space_wait``,
fences and checks for room again; a consumer that frees a slot fences and reads
``space_wait``, and reports once per epoch that the producer wants a wake-up
(:meth:`take_space_signal`).
"""

from __future__ import annotations

import struct
from enum import IntEnum

from .shared import NEEDS_PUBLISH_FENCE, Fence, Segment, attach_view

MAGIC = 0x474E4952444E4649  # b"INFDRING" little-endian
VERSION = 2
HEADER_BYTES = 192
_LINE = 64
# indexes into the header viewed as 64-bit words
_MAGIC, _VERSION, _SLOTS, _SLOT_BYTES, _STRIDE = 0, 1, 2, 3, 4
_TAIL, _SPACE_WAIT = 8, 9
_HEAD, _SLEEPING = 16, 17
_LENGTH = struct.Struct("<q")


class Put(IntEnum):
    """What :meth:`Ring.offer` did."""

    FULL = 0  #: nothing written: the ring is full
    QUEUED = 1  #: written; the consumer still had older slots to read
    WAKE = 2  #: written while the consumer sleeps: ring the consumer's doorbell


class DescriptorTooLargeError(ValueError):
    """A descriptor longer than a ring slot: its bulk belongs in the arena."""


class RingError(RuntimeError):
    """A segment that is not a ring of this version."""


class Ring:
    """One direction, one producer process, one consumer process (see the module docstring)."""

    def __init__(self, segment: Segment) -> None:
        self._segment = segment
        self._buf = segment.buffer
        if segment.size < HEADER_BYTES:
            raise RingError(f"segment {segment.name!r} is too small to be a ring")
        self._words = segment.buffer[:HEADER_BYTES].cast("q")
        if self._words[_MAGIC] != MAGIC or self._words[_VERSION] != VERSION:
            self._words.release()
            raise RingError(f"segment {segment.name!r} is not an inferd ring (version {VERSION})")
        self.slots: int = self._words[_SLOTS]
        self.slot_bytes: int = self._words[_SLOT_BYTES]
        self._stride: int = self._words[_STRIDE]
        self._p_fence = Fence()
        self._c_fence = Fence()
        # each side caches the counter it writes and the last value it read of the other's
        # (separate fields per role, so one object may serve a producer and a consumer thread)
        self._p_tail: int = self._words[_TAIL]
        self._p_head: int = self._words[_HEAD]
        self._c_head: int = self._p_head
        self._c_tail: int = self._p_tail
        self._space_epoch = 0  # producer: epochs of waiting for room
        self._space_signalled = 0  # consumer: last epoch reported by take_space_signal
        self._space_pending = False
        self._rung_epoch = 0  # producer: the last sleeping epoch it answered WAKE for
        self._sleep_epoch: int = abs(self._words[_SLEEPING])  # consumer: epochs of sleeping

    @property
    def name(self) -> str:
        return self._segment.name

    @classmethod
    def create(cls, name: str | None, slots: int, slot_bytes: int) -> Ring:
        if slots < 1:
            raise ValueError(f"a ring needs at least one slot, got {slots}")
        if slot_bytes < 1:
            raise ValueError(f"slot_bytes must be positive, got {slot_bytes}")
        stride = (8 + slot_bytes + _LINE - 1) // _LINE * _LINE
        segment = Segment.create(name, HEADER_BYTES + slots * stride)
        words = segment.buffer[:HEADER_BYTES].cast("q")
        words[_SLOTS], words[_SLOT_BYTES], words[_STRIDE] = slots, slot_bytes, stride
        words[_VERSION] = VERSION
        words[_MAGIC] = MAGIC
        words.release()
        return cls(segment)

    @classmethod
    def attach(cls, name: str) -> Ring:
        return attach_view(name, cls)

    # -- producer ---------------------------------------------------------------------------

    def offer(self, payload: bytes | bytearray | memoryview) -> Put:
        """Copy ``payload`` into the next slot unless the ring is full."""
        size = len(payload) if isinstance(payload, bytes) else memoryview(payload).nbytes
        if size > self.slot_bytes:
            raise DescriptorTooLargeError(
                f"descriptor of {size} bytes does not fit a ring slot of {self.slot_bytes} "
                "bytes; put tensor bytes in the arena and send their offsets"
            )
        tail = self._p_tail
        if tail - self._p_head >= self.slots:
            self._p_head = self._words[_HEAD]
            if tail - self._p_head >= self.slots:
                return Put.FULL
        at = HEADER_BYTES + (tail % self.slots) * self._stride
        if isinstance(payload, bytes):
            self._buf[at + 8 : at + 8 + size] = payload
        else:
            self._buf[at + 8 : at + 8 + size] = memoryview(payload).cast("B")
        _LENGTH.pack_into(self._buf, at, size)
        if NEEDS_PUBLISH_FENCE:
            self._p_fence()
        self._p_tail = tail + 1
        self._words[_TAIL] = tail + 1
        self._p_fence()
        sleeping = self._words[_SLEEPING]
        if sleeping > 0 and sleeping != self._rung_epoch:
            self._rung_epoch = sleeping
            return Put.WAKE
        return Put.QUEUED

    def try_put(self, payload: bytes | bytearray | memoryview) -> bool:
        """Put one descriptor; False when the ring is full (nothing written)."""
        return self.offer(payload) is not Put.FULL

    def wait_for_space(self) -> bool:
        """Ask the consumer for a wake-up when it frees a slot. False if there is room already.

        Call :meth:`stop_waiting_for_space` once room was found.
        """
        self._space_epoch += 1
        self._words[_SPACE_WAIT] = self._space_epoch
        self._p_fence()
        self._p_head = self._words[_HEAD]
        return self._p_tail - self._p_head >= self.slots

    def stop_waiting_for_space(self) -> None:
        self._words[_SPACE_WAIT] = 0

    # -- consumer ---------------------------------------------------------------------------

    def try_get(self) -> bytes | None:
        """Take the oldest descriptor; None when the ring is empty."""
        head = self._c_head
        if head == self._c_tail:
            self._c_tail = self._words[_TAIL]
            if head == self._c_tail:
                return None
        at = HEADER_BYTES + (head % self.slots) * self._stride
        (size,) = _LENGTH.unpack_from(self._buf, at)
        data = bytes(self._buf[at + 8 : at + 8 + size])
        if NEEDS_PUBLISH_FENCE:
            self._c_fence()
        self._c_head = head + 1
        self._words[_HEAD] = head + 1
        self._c_fence()
        epoch = self._words[_SPACE_WAIT]
        if epoch and epoch != self._space_signalled:
            self._space_signalled = epoch
            self._space_pending = True
        return data

    def prepare_to_sleep(self) -> bool:
        """Announce that the consumer sleeps on its doorbell; True if it may (still empty).

        False: a descriptor arrived meanwhile; the consumer is awake again and reads on.
        After True, the consumer waits for its doorbell and calls :meth:`awake` once
        woken (a spurious ring is possible, a lost one is not).
        """
        self._sleep_epoch += 1
        self._words[_SLEEPING] = self._sleep_epoch
        self._c_fence()
        self._c_tail = self._words[_TAIL]
        if self._c_head != self._c_tail:
            self._words[_SLEEPING] = -self._sleep_epoch
            return False
        return True

    def awake(self) -> None:
        """The consumer is awake again: puts stop asking for doorbells until it next sleeps."""
        self._words[_SLEEPING] = -self._sleep_epoch

    def take_space_signal(self) -> bool:
        """True once after a get that freed a slot the producer is waiting for."""
        pending, self._space_pending = self._space_pending, False
        return pending

    # -- either side ------------------------------------------------------------------------

    def __len__(self) -> int:
        """Descriptors waiting (a snapshot; exact only while the other side is idle)."""
        return int(self._words[_TAIL] - self._words[_HEAD])

    def close(self) -> None:
        self._words.release()
        self._segment.close()

    def unlink(self) -> None:
        self._segment.unlink()
