"""Messages of any size over a channel of fixed-size slots.

A message longer than a slot leaves in pieces: every piece carries the message's header with
the ``PIECE`` flag on all but the last, and the receiver joins the pieces of a call before it
hands the message on. The pieces of one message are sent one after another by one coroutine,
so pieces of different calls may interleave but those of one call never do.
"""

from __future__ import annotations

from typing import Protocol

from inferd.server.frontends.messages import HEADER, Kind, Message, decode_message

__all__ = ["MessageLink", "SlotChannel"]

PIECE = 0x80  # flags: more pieces of this message follow


class SlotChannel(Protocol):
    """What :class:`inferd.server.frontends.channel.Channel` offers."""

    async def send(self, payload: bytes | bytearray | memoryview) -> None: ...

    async def receive(self) -> bytes: ...


class MessageLink:
    """``send`` and ``receive`` whole messages over ``channel`` (slots of ``slot_bytes``)."""

    def __init__(self, channel: SlotChannel, slot_bytes: int) -> None:
        if slot_bytes <= HEADER.size:
            raise ValueError(f"slots of {slot_bytes} bytes cannot hold a message header")
        self._channel = channel
        self._room = slot_bytes - HEADER.size
        self._partial: dict[tuple[int, int], list[bytes]] = {}

    async def send(
        self, kind: Kind, call: int, body: bytes | bytearray = b"", flags: int = 0
    ) -> None:
        room = self._room
        if len(body) <= room:
            await self._channel.send(HEADER.pack(kind, flags, call) + body)
            return
        view = memoryview(body)
        for start in range(0, len(view), room):
            last = start + room >= len(view)
            head = HEADER.pack(kind, flags if last else flags | PIECE, call)
            await self._channel.send(head + view[start : start + room])

    async def receive(self) -> Message:
        while True:
            message = decode_message(await self._channel.receive())
            key = (message.call, message.kind)
            if message.flags & PIECE:
                self._partial.setdefault(key, []).append(bytes(message.body))
                continue
            pieces = self._partial.pop(key, None)
            if pieces is None:
                return message
            pieces.append(bytes(message.body))
            return Message(message.kind, message.flags, message.call, memoryview(b"".join(pieces)))

    def forget(self, call: int) -> None:
        """Drop the pieces held of ``call`` (it was cancelled)."""
        for key in [k for k in self._partial if k[0] == call]:
            del self._partial[key]
