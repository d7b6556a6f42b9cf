"""Whether an instance pool or a scheduler still takes work: a three-state machine.

``OPEN`` takes work. ``CLOSING`` (the model version is being unloaded) refuses new work at once
with :class:`~inferd.errors.UnavailableError` while the work already accepted is finished or
failed; ``CLOSED`` holds nothing any more. The states only move forward, along
:data:`_ALLOWED`, like the model lifecycle in :mod:`inferd.core.lifecycle`.
"""

from __future__ import annotations

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
    ``OPEN``; :meth:`_move` checks each step; :meth:`_closed_if_closing` ends a closing run
    once its last accepted request has its answer."""

    _state: RunState = RunState.OPEN

    @property
    def state(self) -> RunState:
        return self._state

    def _move(self, new: RunState) -> None:
        check_transition(self._state, new)
        self._state = new

    def _closed_if_closing(self) -> None:  # the last request accepted has its answer
        if self._state is RunState.CLOSING:
            self._move(RunState.CLOSED)
