"""Messages of any size over a channel of fixed-size slots.

A message longer than a slot has its body written into a block of the sender's arena (the
channel's ``outgoing_arena``, :mod:`.arena`) and only the block's place travels on the ring,
with the ``ARENA`` flag; the receiver copies the body out of its ``incoming_arena`` once and
releases the block. Where there is no arena, or no room in it (or the body is larger than the
whole arena), the message leaves in pieces instead: every piece carries the message's header
with the ``PIECE`` flag on all but the last, and the receiver joins the pieces of a call before
it hands the message on. The pieces of one message are sent one after another by one
coroutine, so pieces of different calls may interleave but those of one call never do.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Protocol

from inferd.errors import InternalError
from inferd.server.frontends.arena import Arena, ArenaError, Block
from inferd.server.frontends.messages import HEADER, Kind, Message, decode_message

__all__ = ["MessageLink", "SlotChannel"]

PIECE = 0x80  # flags: more pieces of this message follow
ARENA = 0x40  # flags: the body is in the sender's arena, at the block the payload names
_BLOCK = struct.Struct("<qqq")  # first slot, slot count, length
_HOLDER = 1  # one allocating process per arena: any non-zero id will do


class SlotChannel(Protocol):
    """What :class:`inferd.server.frontends.channel.Channel` offers."""

    async def send(self, payload: bytes | bytearray | memoryview) -> None: ...

    def try_send(self, payload: bytes | bytearray | memoryview) -> bool: ...

    async def receive(self) -> bytes: ...

    def receive_nowait(self) -> bytes | None: ...


class MessageLink:
    """``send`` and ``receive`` whole messages over ``channel`` (slots of ``slot_bytes``)."""

    def __init__(self, channel: SlotChannel, slot_bytes: int) -> None:
        if slot_bytes <= HEADER.size:
            raise ValueError(f"slots of {slot_bytes} bytes cannot hold a message header")
        self._channel = channel
        self._room = slot_bytes - HEADER.size
        self._partial: dict[tuple[int, int], list[bytes]] = {}
        self._out_arena: Arena | None = getattr(channel, "outgoing_arena", None)
        self._in_arena: Arena | None = getattr(channel, "incoming_arena", None)
        self.arena_messages = 0  #: messages sent through the arena (for tests and statistics)

    async def send(
        self,
        kind: Kind,
        call: int,
        body: bytes | bytearray | list[bytes | memoryview] = b"",
        flags: int = 0,
    ) -> None:
        """Send one message; ``body`` may be a list of parts (bytes or 1-D byte views), which
        are written where the body goes (a ring slot, an arena block) without a join."""
        room = self._room
        whole: bytes | bytearray
        if isinstance(body, list):
            size = sum(map(len, body))
            if size <= room:
                await self._channel.send(b"".join((HEADER.pack(kind, flags, call), *body)))
                return
            block = self._to_arena(body, size)
            whole = b"" if block is not None else b"".join(body)
        else:
            if len(body) <= room:
                await self._channel.send(HEADER.pack(kind, flags, call) + body)
                return
            block = self._to_arena([body], len(body))
            whole = body
        if block is not None:
            place = _BLOCK.pack(block.first, block.count, block.nbytes)
            try:
                await self._channel.send(HEADER.pack(kind, flags | ARENA, call) + place)
            except BaseException:  # not sent (cancelled while the ring was full, closed)
                assert self._out_arena is not None
                self._out_arena.release(block)
                raise
            self.arena_messages += 1
            return
        view = memoryview(whole)
        for start in range(0, len(view), room):
            last = start + room >= len(view)
            head = HEADER.pack(kind, flags if last else flags | PIECE, call)
            await self._channel.send(head + view[start : start + room])

    def send_nowait(
        self, kind: Kind, call: int, body: bytes | list[bytes | memoryview], flags: int = 0
    ) -> bool:
        """Send a message that fits a ring slot now, without a coroutine; False, with nothing
        sent, when it does not fit or the ring has no room (then ``await send(...)`` it)."""
        if isinstance(body, list):
            if sum(map(len, body)) > self._room:
                return False
            return self._channel.try_send(b"".join((HEADER.pack(kind, flags, call), *body)))
        if len(body) > self._room:
            return False
        return self._channel.try_send(HEADER.pack(kind, flags, call) + body)

    def _to_arena(self, parts: Sequence[bytes | bytearray | memoryview], size: int) -> Block | None:
        """The parts copied one after another into a new block of the outgoing arena; None
        if it has no room for ``size`` bytes."""
        arena = self._out_arena
        if arena is None or size > arena.slots * arena.slot_bytes:
            return None
        block = arena.allocate(size, _HOLDER)
        if block is None:
            return None
        view = arena.view(block)
        try:
            at = 0
            for part in parts:
                view[at : at + len(part)] = part
                at += len(part)
        finally:
            view.release()
        return block

    def _from_arena(self, message: Message) -> Message:
        arena = self._in_arena
        if arena is None or len(message.body) != _BLOCK.size:
            raise InternalError("a channel message names an arena block this end cannot read")
        first, count, nbytes = _BLOCK.unpack_from(message.body)
        try:
            block = arena.block(first, count, nbytes, _HOLDER)
        except ArenaError as exc:
            raise InternalError(f"a channel message names a bad arena block: {exc}") from None
        view = arena.view(block)
        try:
            body = bytes(view)
        finally:
            view.release()
        try:
            arena.release(block)
        except ArenaError as exc:
            raise InternalError(str(exc)) from None
        return Message(message.kind, message.flags & ~ARENA, message.call, memoryview(body))

    async def receive(self) -> Message:
        """The next whole message, waiting for one."""
        while True:
            message = self.poll()
            if message is not None:
                return message
            message = self._take(await self._channel.receive())
            if message is not None:
                return message

    def poll(self) -> Message | None:
        """The next whole message if one has arrived, else None (never waits): a reader that
        drains its link with it runs no coroutine per message."""
        receive_nowait = self._channel.receive_nowait
        while True:
            payload = receive_nowait()
            if payload is None:
                return None
            message = self._take(payload)
            if message is not None:
                return message

    def _take(self, payload: bytes) -> Message | None:
        """The message ``payload`` completes (None: a piece of one still arriving)."""
        message = decode_message(payload)
        if not message.flags & (PIECE | ARENA) and not self._partial:  # the common case
            return message
        if message.flags & ARENA:
            return self._from_arena(message)
        key = (message.call, message.kind)
        if message.flags & PIECE:
            self._partial.setdefault(key, []).append(bytes(message.body))
            return None
        pieces = self._partial.pop(key, None)
        if pieces is None:
            return message
        pieces.append(bytes(message.body))
        return Message(message.kind, message.flags, message.call, memoryview(b"".join(pieces)))

    def forget(self, call: int) -> None:
        """Drop the pieces held of ``call`` (it was cancelled)."""
        for key in [k for k in self._partial if k[0] == call]:
            del self._partial[key]
