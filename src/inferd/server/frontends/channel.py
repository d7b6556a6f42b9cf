"""A two-way async channel between the engine and one front end: two rings, two doorbells.

Each end owns one *wake* doorbell and holds the other end's::

    front end ── request ring ──▶ engine      the engine sleeps on its doorbell
    front end ◀── reply ring ─── engine       the front end sleeps on its doorbell

An end rings its peer's doorbell when its put took the outgoing ring from empty to non-empty,
and when its get freed room in the incoming ring while the peer waits for room
(:mod:`.ring`). So one doorbell per end wakes it for both reasons: something to read, or room
to write. The end watches its doorbell with ``loop.add_reader`` on the running loop (asyncio
or uvloop); the callback drains it and wakes every coroutine waiting in :meth:`Channel.send`
or :meth:`Channel.receive`, which then look at the rings again. Nothing is polled on a timer.

Order: descriptors leave in the order ``send`` was called (senders that find the ring full
queue first-in first-out behind one another) and arrive in that order. One process (and one
event loop) per end; an end is not thread-safe.

:func:`create_channel` makes both rings and doorbells in the engine process and returns the
engine's end and a picklable :class:`ChannelSpec` from which the front end attaches its own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .doorbell import Doorbell
from .ring import Put, Ring


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

    def fds(self) -> tuple[int, int]:
        return (self.wake.fileno(), self.peer.fileno())

    def as_dict(self) -> dict[str, str | int]:
        return {
            "incoming": self.incoming,
            "outgoing": self.outgoing,
            "wake_fd": self.wake.fileno(),
            "peer_fd": self.peer.fileno(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, str | int]) -> ChannelSpec:
        return cls(
            incoming=str(data["incoming"]),
            outgoing=str(data["outgoing"]),
            wake=Doorbell.from_fd(int(data["wake_fd"])),
            peer=Doorbell.from_fd(int(data["peer_fd"])),
        )

    def open(self) -> Channel:
        """Attach the front end's end, with its own copies of the doorbells.

        In a child process, :meth:`close` the spec afterwards to drop the inherited copies.
        """
        incoming = Ring.attach(self.incoming)
        try:
            outgoing = Ring.attach(self.outgoing)
        except BaseException:
            incoming.close()
            raise
        return Channel(incoming, outgoing, self.wake.duplicate(), self.peer.duplicate())

    def close(self) -> None:
        """Close this spec's doorbells (in the front end's process, after :meth:`open`)."""
        self.wake.close()
        self.peer.close()


def create_channel(slots: int, slot_bytes: int) -> tuple[Channel, ChannelSpec]:
    """The engine's end (which owns and unlinks the rings) and the spec of the front end's."""
    requests = Ring.create(None, slots, slot_bytes)
    try:
        replies = Ring.create(None, slots, slot_bytes)
    except BaseException:
        requests.close()
        requests.unlink()
        raise
    engine_bell, frontend_bell = Doorbell(), Doorbell()
    engine = Channel(requests, replies, engine_bell, frontend_bell, owner=True)
    spec = ChannelSpec(replies.name, requests.name, frontend_bell, engine_bell)
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
        self._owner = owner
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._send_lock: asyncio.Lock | None = None
        self._blocked_senders = 0
        self._sent = self._received = self._waits_for_room = 0
        self._closed = False

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

    def _put(self, payload: bytes | bytearray | memoryview) -> bool:
        result = self.outgoing.offer(payload)
        if result is Put.FULL:
            return False
        self._sent += 1
        if result is Put.WAKE:
            self.peer.ring()
        return True

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
            await self._sleep(loop)

    # -- lifetime -------------------------------------------------------------------------------

    def unlink(self) -> None:
        """Remove the rings' names from ``/dev/shm`` now; both mappings stay valid.

        The engine calls this once the front end has attached, so that nothing is left behind
        even if both processes are killed.
        """
        self.incoming.unlink()
        self.outgoing.unlink()

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
        self.wake.close()
        self.peer.close()
