"""Model version lifecycle: states and the transitions allowed between them."""

from __future__ import annotations

import enum

from inferd.errors import InternalError


class ModelState(enum.Enum):
    UNKNOWN = "UNKNOWN"
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


_ALLOWED: dict[ModelState, frozenset[ModelState]] = {
    ModelState.UNKNOWN: frozenset({ModelState.LOADING, ModelState.UNAVAILABLE}),
    ModelState.LOADING: frozenset({ModelState.READY, ModelState.UNAVAILABLE}),
    ModelState.READY: frozenset({ModelState.UNLOADING}),
    ModelState.UNLOADING: frozenset({ModelState.UNAVAILABLE}),
    ModelState.UNAVAILABLE: frozenset({ModelState.LOADING}),
}


def check_transition(old: ModelState, new: ModelState) -> None:
    if new not in _ALLOWED[old]:
        raise InternalError(f"illegal model state transition {old.value} -> {new.value}")
