"""Each model's loaded versions: swap in, publish, retire with a drain, pin, roll back.

The repository manager keeps the catalogue (what the repository holds, load and unload
requests, uploads, ensembles) and hands a model's prepared versions to
:class:`VersionLifecycle`, which owns what happens to them from then on:

- **swap in**: load the versions off the loop (warmed up), then make them READY together;
- **publish**: one dict assignment updates the hot-path view that requests read;
- **retire**: the one way a version leaves: UNLOADING, unpublished, drained (requests in flight
  finish on the version that accepted them), shut down, closed, UNAVAILABLE. A reload, an
  unload, a rollback and the server's close all retire through it;
- **pin / roll back**: make an earlier version the default until a load or ``unpin``.

Call every method but :meth:`VersionLifecycle.publish` with the model's lock held.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from inferd.backends.calls import LoopCalls
from inferd.backends.registry import BackendRegistry
from inferd.core.lifecycle import ModelState
from inferd.errors import InvalidArgumentError, NotFoundError
from inferd.repository.calls import InProcessCaller
from inferd.repository.ensembles import load_ensemble_version
from inferd.repository.layout import list_versions
from inferd.repository.loader import (
    LoadedVersion,
    LoadOptions,
    PreparedModel,
    load_version,
    prepare,
)
from inferd.repository.manager_types import ServingModel
from inferd.repository.recent import RecentRequests
from inferd.repository.records import LoadSource, ModelRecord, Pin
from inferd.repository.rollback import rollback_target
from inferd.scheduling.stats import ModelStats

_log = logging.getLogger("inferd.repository")

__all__ = ["VersionLifecycle"]


class VersionLifecycle:
    """Swaps model versions in and out of service; the only writer of the hot-path view."""

    def __init__(
        self,
        registry: BackendRegistry,
        options: LoadOptions,
        *,
        load_gate: asyncio.Semaphore,
        get: Callable[[str, int | None], ServingModel],
        caller: InProcessCaller,
        recent: RecentRequests | None,
        count_failure: Callable[[str], None],
    ) -> None:
        self._registry = registry
        self._options = options
        self._load_gate = load_gate
        self._get = get
        self._caller = caller
        self._recent = recent
        self._count_failure = count_failure
        # the hot-path view requests read: name -> (versions -> serving, default version)
        self.ready: dict[str, tuple[dict[int, ServingModel], ServingModel]] = {}

    # -- publish -------------------------------------------------------------------------------

    def publish(self, record: ModelRecord) -> None:
        """Update the hot-path view for one model (a single dict assignment)."""
        default = record.default_version()
        if default is None:
            self.ready.pop(record.name, None)
            return
        versions = {v: lv.serving for v, lv in record.loaded.items()}
        self.ready[record.name] = (versions, versions[default])

    # -- swap in -------------------------------------------------------------------------------

    async def swap_in(self, record: ModelRecord, prepared: PreparedModel) -> None:
        """Load ``prepared``'s versions, make them READY, then retire the versions they replace
        and those the version policy no longer selects. Versions that fail keep their
        predecessors serving; if all fail, nothing changes and the load is refused."""
        name = record.name
        new: dict[int, LoadedVersion] = {}
        errors: list[str] = []
        record.forget_model_level()
        for version in prepared.versions:
            if version not in record.loaded:
                record.move(version, ModelState.LOADING)
        for version in prepared.versions:
            if version not in record.stats:
                record.stats[version] = ModelStats(name, version)
        results = await asyncio.gather(
            *(self.load_one(prepared, v, record.stats[v]) for v in prepared.versions),
            return_exceptions=True,
        )
        for version, result in zip(prepared.versions, results, strict=True):
            if isinstance(result, BaseException):
                reason = str(result)
                errors.append(reason)
                self._count_failure(name)
                if version not in record.loaded:
                    record.move(version, ModelState.UNAVAILABLE, reason)
                _log.error("%s", reason)
            else:
                new[version] = result
        if not new:
            # as Triton: a model whose versions all failed is a bad argument to the load
            raise InvalidArgumentError(errors[0] if errors else f"failed to load '{name}'")
        old = record.loaded
        keep_old = {v: lv for v, lv in old.items() if v not in new and v in prepared.versions}
        retired = [lv for v, lv in old.items() if v in new or v not in prepared.versions]
        record.loaded = {**keep_old, **new}
        for version in record.loaded:
            record.move(version, ModelState.READY)
        await self.retire(record, retired)
        for version, lv in new.items():
            spec = lv.serving.spec
            kind = "ensemble" if spec.is_ensemble else spec.backend
            _log.info("model '%s' version %d is READY (%s)", name, version, kind)

    async def load_one(
        self, prepared: PreparedModel, version: int, stats: ModelStats
    ) -> LoadedVersion:
        """Load one version off the loop, warmed up with the model's recent requests."""
        if prepared.spec.is_ensemble:
            return load_ensemble_version(prepared, version, stats, self._get, self._caller)
        loop = asyncio.get_running_loop()
        recent = self._recent.sample(prepared.spec.name) if self._recent is not None else []
        return await asyncio.to_thread(
            load_version,
            prepared,
            version,
            self._registry,
            loop,
            stats,
            inline_max_us=self._options.inline_max_us,
            calls=LoopCalls(loop, self._caller.stream_outputs),
            recent=recent,
            bounded_memory=self._options.bounded_memory,
        )

    # -- retire --------------------------------------------------------------------------------

    async def retire(
        self,
        record: ModelRecord,
        retired: list[LoadedVersion],
        *,
        reason: str = "unloaded",
        drain_timeout_s: float | None = None,
    ) -> None:
        """The one way versions leave service. ``retired`` are versions already taken out of
        ``record.loaded`` (or replaced there by a new load of the same number): those whose
        number left move to UNLOADING, the view is published without them, then each retired
        version drains its in-flight requests (at most ``drain_timeout_s``; None: as long as
        they take), is shut down and closed, and those that left become UNAVAILABLE."""
        leaving = [lv for lv in retired if lv.serving.version not in record.loaded]
        for lv in leaving:
            record.move(lv.serving.version, ModelState.UNLOADING)
        self.publish(record)
        for lv in retired:
            await self._drain(record.name, lv, drain_timeout_s)
            lv.scheduler.shutdown()
            await asyncio.to_thread(lv.close)
        for lv in leaving:
            record.move(lv.serving.version, ModelState.UNAVAILABLE, reason)

    @staticmethod
    async def _drain(name: str, lv: LoadedVersion, timeout_s: float | None) -> None:
        try:
            await asyncio.wait_for(lv.scheduler.drain(), timeout=timeout_s)
        except TimeoutError:
            _log.warning(
                "model '%s' version %d: requests still in flight after %.1f s are failed",
                name,
                lv.serving.version,
                timeout_s,
            )

    async def retire_all(
        self, record: ModelRecord, *, drain_timeout_s: float | None = None
    ) -> None:
        """Retire every loaded version of the model (an unload, the server's close) and lift
        its pin."""
        retired = list(record.loaded.values())
        record.loaded = {}
        await self.retire(record, retired, drain_timeout_s=drain_timeout_s)
        record.pin = None

    # -- pin and roll back ---------------------------------------------------------------------

    def unpin(self, record: ModelRecord) -> None:
        """Drop a rollback's pin (a load applies the version policy again)."""
        if record.pin is not None:
            record.pin = None
            self.publish(record)

    async def roll_back(self, record: ModelRecord, version: int | None) -> Pin:
        """Pin ``version`` (None: the highest below the default one) as the model's default:
        load it (warmed up) unless it is loaded, publish it in one step, then retire the
        version it replaces."""
        name = record.name
        current = record.default_version()
        source = record.source
        if current is None or source is None:
            raise NotFoundError(f"cannot roll '{name}' back: it has no loaded version")
        available = await asyncio.to_thread(list_versions, source.model_dir)
        target = rollback_target(name, current, available, version)
        if target not in record.loaded:
            record.loaded[target] = await self._load_for_rollback(record, source, target)
        pin = Pin(target, current)
        record.move(target, ModelState.READY, pin.reason(name))
        record.pin = pin
        leaving = record.loaded.pop(current)
        _log.info("model '%s' rolled back from version %d to %d", name, current, target)
        await self.retire(record, [leaving], reason=f"unloaded: rolled back to {target}")
        return pin

    async def _load_for_rollback(
        self, record: ModelRecord, source: LoadSource, version: int
    ) -> LoadedVersion:
        """Load ``version`` as the model's last load did, its version policy widened to it."""
        async with self._load_gate:
            prepared = await asyncio.to_thread(
                prepare,
                record.name,
                source.model_dir,
                self._registry,
                self._options,
                override_json=source.override_json,
            )
            prepared.versions = [version]
            record.move(version, ModelState.LOADING)
            stats = record.stats.setdefault(version, ModelStats(record.name, version))
            try:
                return await self.load_one(prepared, version, stats)
            except Exception as exc:
                self._count_failure(record.name)
                record.move(version, ModelState.UNAVAILABLE, str(exc))
                raise
