"""What the repository manager keeps per model: its versions' states, the loaded versions, where
it was loaded from, and the version a rollback pinned as its default."""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, field
from pathlib import Path

from inferd.core.lifecycle import ModelState, check_transition
from inferd.repository.loader import LoadedVersion
from inferd.scheduling.stats import ModelStats

_log = logging.getLogger("inferd.repository")

MODEL_LEVEL = 0  # status key for a model whose versions are not known (e.g. a bad config)


class ControlMode(enum.Enum):
    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"
    ON_DEMAND = "on-demand"  # a request loads its model; a memory budget unloads idle ones


@dataclass(slots=True)
class VersionStatus:
    state: ModelState
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Pin:
    """The default version a rollback chose, and the version it replaced."""

    version: int
    rolled_back_from: int

    def reason(self, name: str) -> str:
        """What the repository index says of the pinned version."""
        return (
            f"pinned as the default version by a rollback from version {self.rolled_back_from};"
            f" 'inferd model unpin {name}' (or an explicit load) returns to the version policy"
        )


@dataclass(frozen=True, slots=True)
class LoadSource:
    """Where the model's last successful load read it from: the model folder (a repository's or
    an upload's) and the load request's config override, if any."""

    model_dir: Path
    override_json: str | None = None
    upload: bool = False


@dataclass(slots=True)
class ModelRecord:
    name: str
    # read freely; changed only through move() and forget_model_level()
    status: dict[int, VersionStatus] = field(default_factory=dict)
    loaded: dict[int, LoadedVersion] = field(default_factory=dict)
    fingerprint: str = ""
    override_dir: Path | None = None  # a directory made from `file:` overrides
    source: LoadSource | None = None
    # the default version a rollback chose; None: the highest loaded version
    pin: Pin | None = None
    # statistics per version number, kept across reloads so counters never go backwards
    stats: dict[int, ModelStats] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def move(self, version: int, state: ModelState, reason: str = "") -> None:
        """The one place a version's state changes: the lifecycle table checks the transition.

        Staying in the same state only updates the reason (a reload of a READY version keeps
        it READY; a second failure replaces the first failure's reason).
        """
        current = self.status.get(version)
        old = current.state if current is not None else ModelState.UNKNOWN
        if old is not state:
            check_transition(old, state)
            _log.debug(
                "model '%s' version %d: %s -> %s", self.name, version, old.value, state.value
            )
        self.status[version] = VersionStatus(state, reason)

    def forget_model_level(self) -> None:
        """Drop the model-level entry once the model's versions are known."""
        self.status.pop(MODEL_LEVEL, None)

    def default_version(self) -> int | None:
        """The version a request without one gets: the pinned one while it is loaded, else the
        highest loaded version (None: nothing is loaded)."""
        if not self.loaded:
            return None
        if self.pin is not None and self.pin.version in self.loaded:
            return self.pin.version
        return max(self.loaded)


__all__ = ["MODEL_LEVEL", "ControlMode", "LoadSource", "ModelRecord", "Pin", "VersionStatus"]
