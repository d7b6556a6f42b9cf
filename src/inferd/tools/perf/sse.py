"""Server-sent events as the load generator reads them: timestamped bytes in, events out (pure).

The connection stamps each piece of body as it arrives and keeps the bytes; once the answer has
ended, :func:`events` splits them into events (a blank line ends one; ``\\n``, ``\\r\\n`` or
``\\r`` end lines) and gives each the time of the piece that completed it. Only the ``data:``
lines are kept (joined with ``\\n``); comments (``:``) and other fields are skipped. Nothing is
parsed as JSON here: the caller reads the events it needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    """One event: when its last byte arrived and its data lines, joined (an event without a
    ``data:`` line is not reported)."""

    at_ns: int
    data: bytes


def _lines(text: bytes) -> list[bytes]:
    return text.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")


def events(pieces: Iterable[tuple[int, bytes]]) -> list[Event]:
    """The events in ``pieces`` (``(arrival_ns, bytes)`` in order of arrival); an event the
    stream left unfinished (no blank line after it) is dropped, as the EventSource rules say."""
    found: list[Event] = []
    pending = b""
    data: list[bytes] = []
    has_data = False
    for at_ns, piece in pieces:
        pending += piece
        # keep a trailing "\r": it may be the first half of a "\r\n" split across pieces
        cut = len(pending) - 1 if pending.endswith(b"\r") else len(pending)
        last_newline = max(pending.rfind(b"\n", 0, cut), pending.rfind(b"\r", 0, cut))
        if last_newline < 0:
            continue
        complete, pending = pending[: last_newline + 1], pending[last_newline + 1 :]
        for line in _lines(complete)[:-1]:
            if not line:  # a blank line dispatches the event
                if has_data:
                    found.append(Event(at_ns, b"\n".join(data)))
                data, has_data = [], False
                continue
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            if name == b"data":
                data.append(value[1:] if value.startswith(b" ") else value)
                has_data = True
    return found


__all__ = ["Event", "events"]
