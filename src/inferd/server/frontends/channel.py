"""A two-way async channel between the engine and one front end: two rings, two doorbells.

Each end owns one *wake* doorbell and holds the other end's::

    front end ── request ring ──▶ engine      the engine sleeps on its doorbell
    front end ◀── reply ring ─── engine       the front end sleeps on its doorbell

An end rings its peer's doorbell when its put found the peer asleep on the outgoing ring (the
peer drains a ring before it says so), and when its get freed room in the incoming ring while
the peer waits for room (:mod:`.ring`). The ring for data is deferred to the end of the loop's
current pass, so that the replies one pass produces (a batch's) are all on the ring when the
peer wakes: one doorbell, one wake-up. So one doorbell per end wakes it for both reasons:
something to read, or room to write. The end watches its doorbell with ``loop.add_reader`` on
the running loop (asyncio or uvloop); the callback drains it and wakes every coroutine waiting
in :meth:`Channel.send` or :meth:`Channel.receive`, which then look at the rings again.
Nothing is polled on a timer.

Order: descriptors leave in the order ``send`` was called (senders that find the ring full
queue first-in first-out behind one another) and arrive in that order. One process (and one
event loop) per end; an end is not thread-safe.

:func:`create_channel` makes both rings and doorbells in the engine process and returns the
engine's end and a picklable :class:`ChannelSpec` from which the front end attaches its own.
With them it makes two arenas (:mod:`.arena`), one per direction, for messages too long for a
ring slot: the sending end allocates in its ``outgoing_arena`` and the receiving end releases
the block once it has read it (:mod:`.link`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .arena import Arena
from .doorbell import Doorbell
from .ring import Put, Ring

#: the arenas' default geometry (per direction): 256 slots of 64 KiB, 16 MiB of /dev/shm that
#: is only backed by memory where a message has been written
ARENA_SLOTS = 256
ARENA_SLOT_BYTES = 64 * 1024


@dataclass(frozen=True)
class ChannelStatistics:
    """Counters of one end since it was opened (a snapshot)."""

    sent: int  #: descriptors put on the outgoing ring
    received: int  #: descriptors taken from the incoming ring
    doorbells: int  #: writes to the peer's doorbell (data for it, or room it waited for)
    waits_for_room: int  #: times a sender found the outgoing ring full and slept


class ChannelClosedError(ConnectionError):
    """The channel was closed while a coroutine was waiting on it."""


@dataclass(frozen=True)
class ChannelSpec:
    """What the front end needs to open its end (picklable for a spawned process).

    For a child started with ``subprocess``, pass ``fds()`` in ``pass_fds`` and send
    :meth:`as_dict`; the child calls :meth:`from_dict`.
    """

    incoming: str  #: ring name the front end reads (replies)
    outgoing: str  #: ring name the front end writes (requests)
    wake: Doorbell  #: the front end's doorbell
    peer: Doorbell  #: the engine's doorbell
    incoming_arena: str | None = None  #: arena name the front end reads (replies' bodies)
    outgoing_arena: str | None = None  #: arena name the front end allocates in (requests')

    def fds(self) -> tuple[int, int]:
        return (self.wake.fileno(), self.peer.fileno())

    def as_dict(self) -> dict[str, str | int]:
        data: dict[str, str | int] = {
            "incoming": self.incoming,
            "outgoing": self.outgoing,
            "wake_fd": self.wake.fileno(),
            "peer_fd": self.peer.fileno(),
        }
        if self.incoming_arena is not None and self.outgoing_arena is not None:
            data["incoming_arena"] = self.incoming_arena
            data["outgoing_arena"] = self.outgoing_arena
        return data

    @classmethod
    def from_dict(cls, data: dict[str, str | int]) -> ChannelSpec:
        return cls(
            incoming=str(data["incoming"]),
            outgoing=str(data["outgoing"]),
            wake=Doorbell.from_fd(int(data["wake_fd"])),
            peer=Doorbell.from_fd(int(data["peer_fd"])),
            incoming_arena=None if "incoming_arena" not in data else str(data["incoming_arena"]),
            outgoing_arena=None if "outgoing_arena" not in data else str(data["outgoing_arena"]),
        )

    def open(self) -> Channel:
        """Attach the front end's end, with its own copies of the doorbells.

        In a child process, :meth:`close` the spec afterwards to drop the inherited copies.
        """
        opened: list[Ring | Arena] = []
        try:
            incoming = Ring.attach(self.incoming)
            opened.append(incoming)
            outgoing = Ring.attach(self.outgoing)
            opened.append(outgoing)
            in_arena = out_arena = None
            if self.incoming_arena is not None and self.outgoing_arena is not None:
                in_arena = Arena.attach(self.incoming_arena)
                opened.append(in_arena)
                out_arena = Arena.attach(self.outgoing_arena)
                opened.append(out_arena)
        except BaseException:
            for each in opened:
                each.close()
            raise
        channel = Channel(incoming, outgoing, self.wake.duplicate(), self.peer.duplicate())
        channel.incoming_arena, channel.outgoing_arena = in_arena, out_arena
        return channel

    def close(self) -> None:
        """Close this spec's doorbells (in the front end's process, after :meth:`open`)."""
        self.wake.close()
        self.peer.close()


def create_channel(
    slots: int,
    slot_bytes: int,
    arena_slots: int = ARENA_SLOTS,
    arena_slot_bytes: int = ARENA_SLOT_BYTES,
) -> tuple[Channel, ChannelSpec]:
    """The engine's end (which owns and unlinks the rings and arenas) and the spec of the
    front end's. ``arena_slots=0``: no arenas (long messages go through the rings in pieces)."""
    made: list[Ring | Arena] = []
    try:
        requests = Ring.create(None, slots, slot_bytes)
        made.append(requests)
        replies = Ring.create(None, slots, slot_bytes)
        made.append(replies)
        request_arena = reply_arena = None
        if arena_slots:
            request_arena = Arena.create(None, arena_slots, arena_slot_bytes)
            made.append(request_arena)
            reply_arena = Arena.create(None, arena_slots, arena_slot_bytes)
            made.append(reply_arena)
    except BaseException:
        for each in made:
            each.close()
            each.unlink()
        raise
    engine_bell, frontend_bell = Doorbell(), Doorbell()
    engine = Channel(requests, replies, engine_bell, frontend_bell, owner=True)
    engine.incoming_arena, engine.outgoing_arena = request_arena, reply_arena
    spec = ChannelSpec(
        replies.name,
        requests.name,
        frontend_bell,
        engine_bell,
        incoming_arena=None if reply_arena is None else reply_arena.name,
        outgoing_arena=None if request_arena is None else request_arena.name,
    )
    return engine, spec


class Channel:
    """One end: ``send`` on the outgoing ring, ``receive`` from the incoming one."""

    def __init__(
        self, incoming: Ring, outgoing: Ring, wake: Doorbell, peer: Doorbell, owner: bool = False
    ) -> None:
        self.incoming = incoming
        self.outgoing = outgoing
        self.wake = wake
        self.peer = peer
        #: where long messages' bodies go (see :mod:`.link`): the arena this end allocates in,
        #: and the one the peer allocates in and this end releases
        self.outgoing_arena: Arena | None = None
        self.incoming_arena: Arena | None = None
        self._owner = owner
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._send_lock: asyncio.Lock | None = None
        self._blocked_senders = 0
        self._sent = self._received = self._waits_for_room = 0
        self._closed = False
        self._ring_pending = False  # a doorbell for the peer is due at the end of this pass

    # -- the loop side ----------------------------------------------------------------------

    def _watch(self) -> asyncio.AbstractEventLoop:
        if self._closed:
            raise ChannelClosedError("channel is closed")
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
            loop.add_reader(self.wake.fileno(), self._on_wake)
            self._send_lock = asyncio.Lock()
        return loop

    def _on_wake(self) -> None:
        self.wake.drain()
        self.incoming.awake()
        self._wake_all()

    def _wake_all(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def _sleep(self, loop: asyncio.AbstractEventLoop) -> None:
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        await fut
        if self._closed:
            raise ChannelClosedError("channel is closed")

    # -- sending ----------------------------------------------------------------------------

    async def send(self, payload: bytes | bytearray | memoryview) -> None:
        """Put one descriptor on the outgoing ring, waiting for room while it is full."""
        loop = self._watch()
        if not self._blocked_senders and self._put(payload):
            return
        assert self._send_lock is not None
        self._blocked_senders += 1
        try:
            async with self._send_lock:
                while not self._put(payload):
                    if self.outgoing.wait_for_space():
                        self._waits_for_room += 1
                        try:
                            await self._sleep(loop)
                        finally:
                            self.outgoing.stop_waiting_for_space()
                    else:
                        self.outgoing.stop_waiting_for_space()
        finally:
            self._blocked_senders -= 1

    def try_send(self, payload: bytes | bytearray | memoryview) -> bool:
        """Put one descriptor now if the ring has room and no sender waits for room before
        this one (so order is kept); False, with nothing sent, otherwise."""
        self._watch()
        return not self._blocked_senders and self._put(payload)

    def _put(self, payload: bytes | bytearray | memoryview) -> bool:
        result = self.outgoing.offer(payload)
        if result is Put.FULL:
            return False
        self._sent += 1
        if result is Put.WAKE and not self._ring_pending:
            self._ring_pending = True
            assert self._loop is not None
            self._loop.call_soon(self._ring_peer)
        return True

    def _ring_peer(self) -> None:
        self._ring_pending = False
        if not self._closed:
            self.peer.ring()

    # -- receiving ----------------------------------------------------------------------------

    def receive_nowait(self) -> bytes | None:
        """The next descriptor if one is waiting (the peer is woken if it waits for room)."""
        data = self.incoming.try_get()
        if data is not None:
            self._received += 1
            if self.incoming.take_space_signal():
                self.peer.ring()
        return data

    def statistics(self) -> ChannelStatistics:
        return ChannelStatistics(self._sent, self._received, self.peer.rung, self._waits_for_room)

    async def receive(self) -> bytes:
        """The next descriptor, waiting for one."""
        loop = self._watch()
        while True:
            data = self.receive_nowait()
            if data is not None:
                return data
            if self.incoming.prepare_to_sleep():  # else a descriptor arrived meanwhile
                await self._sleep(loop)

    # -- lifetime -------------------------------------------------------------------------------

    def unlink(self) -> None:
        """Remove the rings' names from ``/dev/shm`` now; both mappings stay valid.

        The engine calls this once the front end has attached, so that nothing is left behind
        even if both processes are killed.
        """
        self.incoming.unlink()
        self.outgoing.unlink()
        for arena in (self.incoming_arena, self.outgoing_arena):
            if arena is not None:
                arena.unlink()

    def close(self) -> None:
        """Stop watching, wake waiters with :class:`ChannelClosedError`, unmap the rings.

        The engine's end (the creator) also unlinks the rings and closes both doorbells.
        """
        if self._closed:
            return
        self._closed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self.wake.fileno())
        self._wake_all()
        self.incoming.close()
        self.outgoing.close()
        if self._owner:
            self.incoming.unlink()
            self.outgoing.unlink()
        for arena in (self.incoming_arena, self.outgoing_arena):
            if arena is not None:
                arena.close()
                if self._owner:
                    arena.unlink()
        self.wake.close()
        self.peer.close()
