"""What the engine needs from the repository: serving versions and the manager protocol."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from inferd.core.inference import InferRequest
from inferd.core.metadata import IndexEntry
from inferd.core.model_spec import ModelSpec
from inferd.core.statistics import StatsSnapshot
from inferd.scheduling.stats import ModelStats

if TYPE_CHECKING:  # the rollback module imports the loader, which imports this module
    from inferd.repository.records import Pin


class Scheduler(Protocol):
    async def submit(
        self, request: InferRequest, rows: int = 1
    ) -> dict[str, np.ndarray[Any, Any]]: ...

    async def drain(self) -> None: ...

    def shutdown(self) -> None: ...


@dataclass(slots=True)
class ServingModel:
    """One READY model version as the engine sees it."""

    spec: ModelSpec
    version: int
    scheduler: Scheduler
    stats: ModelStats
    labels: dict[str, list[str]] = field(default_factory=dict)  # output name -> class labels
    # distinct for every load of this version: response-cache keys include it, so a reloaded
    # version never answers from the entries of an earlier load
    cache_epoch: int = 0
    # when this load of the version was made (Unix seconds: shown to clients, e.g. /v1/models)
    loaded_at_s: float = field(default_factory=time.time)


class ModelManager(Protocol):
    def get(self, name: str, version: int | None) -> ServingModel: ...

    async def acquire(self, name: str, version: int | None) -> ServingModel: ...

    def ready_versions(self, name: str) -> list[int]: ...

    def all_ready(self) -> bool: ...

    def load_failures(self) -> dict[str, int]: ...

    async def index(self, *, ready_only: bool) -> list[IndexEntry]: ...

    async def load(
        self, name: str, *, config_json: str | None, files: dict[str, bytes] | None
    ) -> None: ...

    async def unload(self, name: str, *, unload_dependents: bool) -> None: ...

    async def rollback(self, name: str, version: int | None) -> Pin: ...

    async def unpin(self, name: str) -> None: ...

    def statistics(self, name: str, version: int | None) -> list[StatsSnapshot]: ...
