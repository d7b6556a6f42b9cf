"""Whether an instance pool or a scheduler still takes work: a three-state machine.

``OPEN`` takes work. ``CLOSING`` (the model version is being unloaded) refuses new work at once
with :class:`~inferd.errors.UnavailableError` while the work already accepted is finished or
failed; ``CLOSED`` holds nothing any more. The states only move forward, along
:data:`_ALLOWED`, like the model lifecycle in :mod:`inferd.core.lifecycle`.
"""

from __future__ import annotations

import asyncio
import enum

from inferd.errors import InternalError, UnavailableError

__all__ = ["RunState", "Stateful", "check_transition", "unloading_error"]


class RunState(enum.Enum):
    OPEN = "OPEN"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"


_ALLOWED: dict[RunState, frozenset[RunState]] = {
    RunState.OPEN: frozenset({RunState.CLOSING}),
    RunState.CLOSING: frozenset({RunState.CLOSED}),
    RunState.CLOSED: frozenset(),
}


def check_transition(old: RunState, new: RunState) -> None:
    if new not in _ALLOWED[old]:
        raise InternalError(f"illegal scheduler state transition {old.value} -> {new.value}")


def unloading_error(model: str, version: str) -> UnavailableError:
    """The answer to work that reaches a pool or scheduler once it is closing or closed."""
    return UnavailableError(
        f"model '{model}' version {version} is unloading and takes no new requests"
    )


class Stateful:
    """The state of a scheduler that takes work until it is shut down: ``_state`` starts
    ``OPEN``; :meth:`_move` checks each step. The requests in flight are counted here
    (:meth:`_work_begins`, :meth:`_work_ends`): :meth:`drain` waits until none is, and a
    closing run ends once its last accepted request has its answer. A subclass calls
    :meth:`_init_work` in its constructor."""

    _state: RunState = RunState.OPEN
    _in_flight: int
    _idle: asyncio.Event

    def _init_work(self) -> None:
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def state(self) -> RunState:
        return self._state

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _move(self, new: RunState) -> None:
        check_transition(self._state, new)
        self._state = new

    def _work_begins(self) -> None:  # on the event loop thread
        self._in_flight += 1
        self._idle.clear()

    def _work_ends(self) -> None:  # on the event loop thread
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()
            self._closed_if_closing()

    async def drain(self) -> None:
        """Wait until no request is in flight."""
        await self._idle.wait()

    def _begin_closing(self) -> bool:
        """Move an open run to ``CLOSING`` (``CLOSED`` at once when nothing is in flight);
        False when it was not open (a second shutdown changes nothing)."""
        if self._state is not RunState.OPEN:
            return False
        self._move(RunState.CLOSING)
        return True

    def _closed_if_idle(self) -> None:  # the end of a shutdown: nothing was left in flight
        if self._in_flight == 0:
            self._closed_if_closing()

    def _closed_if_closing(self) -> None:  # the last request accepted has its answer
        if self._state is RunState.CLOSING:
            self._move(RunState.CLOSED)
