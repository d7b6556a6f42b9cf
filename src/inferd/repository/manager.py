"""The repository manager: the catalogue of models, and load/unload/poll requests.

The manager scans the repository, answers load, unload and poll requests (uploads and
ensembles' step models included) and prepares each model's config in worker threads so the
event loop keeps serving other models. What happens to a model's versions once prepared (swap
in, publish, retire with a drain, pin, roll back) is :mod:`inferd.repository.lifecycle`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from pathlib import Path

from inferd.backends.registry import BackendRegistry
from inferd.codecs.model_config import parse_json_config
from inferd.core.lifecycle import ModelState
from inferd.core.metadata import IndexEntry
from inferd.core.names import check_model_name
from inferd.core.statistics import StatsSnapshot
from inferd.errors import (
    InferdError,
    InvalidArgumentError,
    ModelLoadError,
    NotFoundError,
    UnavailableError,
)
from inferd.repository.calls import InProcessCaller
from inferd.repository.ensembles import EnsembleDependencies
from inferd.repository.layout import duplicated, find_models
from inferd.repository.lifecycle import VersionLifecycle
from inferd.repository.loader import LoadOptions, prepare
from inferd.repository.manager_types import ServingModel
from inferd.repository.memory import folder_bytes
from inferd.repository.on_demand import OnDemandLoader, OnDemandSettings, OnDemandStats
from inferd.repository.poll import fingerprint
from inferd.repository.recent import RecentRequests
from inferd.repository.records import (
    MODEL_LEVEL,
    ControlMode,
    LoadSource,
    ModelRecord,
    VersionStatus,
)
from inferd.repository.rollback import Pin, refuse_in_mode_none
from inferd.repository.trust import check_client_config
from inferd.repository.uploads import (
    UploadArea,
    check_upload_allowed,
    no_code_vet,
    upload_parts,
)
from inferd.repository.views import index_entries, ready_statistics
from inferd.scheduling.response_cache import ResponseCache

_log = logging.getLogger("inferd.repository")

__all__ = ["ControlMode", "ModelRecord", "RepositoryManager"]


class RepositoryManager:
    """Implements :class:`inferd.repository.manager_types.ModelManager`."""

    def __init__(
        self,
        roots: Iterable[Path],
        registry: BackendRegistry,
        *,
        mode: ControlMode = ControlMode.NONE,
        options: LoadOptions | None = None,
        load_parallelism: int = 4,
        allow_model_upload: bool = False,
        allow_code_upload: bool = False,
        response_cache: ResponseCache | None = None,
        recent: RecentRequests | None = None,
        on_change: Callable[[str, Path | None], Awaitable[None]] | None = None,
        on_demand: OnDemandSettings | None = None,
    ) -> None:
        self._roots = [Path(r) for r in roots]
        self._allow_model_upload = allow_model_upload
        self._allow_code_upload = allow_code_upload
        self._registry = registry
        self._mode = mode
        self._options = options if options is not None else LoadOptions()
        self._records: dict[str, ModelRecord] = {}
        self._load_gate = asyncio.Semaphore(max(1, load_parallelism))
        self._expected: set[str] = set()  # models that should be loaded (for readiness)
        self._load_failures: dict[str, int] = {}  # failed loads per model name, for metrics
        self._uploads = UploadArea()
        # ensemble steps and models calling models use the cache of the models that enable it
        self._caller = InProcessCaller(self.get, response_cache)
        self._ensembles = EnsembleDependencies(self._load, self._is_ready, self._model_dirs)
        # the requests each model answered lately, to warm up its next version
        self._recent = recent
        self._versions = VersionLifecycle(
            registry,
            self._options,
            load_gate=self._load_gate,
            get=self.get,
            caller=self._caller,
            recent=recent,
            count_failure=self._count_failure,
        )
        # the hot-path view: name -> (versions -> serving, default version), written only by
        # the lifecycle's publish
        self._ready = self._versions.ready
        # set once drain() ran out of its grace period: close() then waits no longer
        self._grace_spent = False
        # told of each model loaded (with its folder) or unloaded (None): its traffic policy
        self._on_change = on_change
        # on-demand mode: loads on first request, unloads idle models to fit the memory budget
        self._on_demand: OnDemandLoader | None = None
        if mode is ControlMode.ON_DEMAND:
            self._on_demand = OnDemandLoader(
                on_demand if on_demand is not None else OnDemandSettings(),
                load=self._load_on_demand,
                unload=self._evict,
                loaded=self._in_flight_by_model,
                estimate=self._size_on_disk,
            )

    @property
    def mode(self) -> ControlMode:
        return self._mode

    @property
    def caller(self) -> InProcessCaller:
        """Runs a request on a READY model in process (ensemble steps, models calling models)."""
        return self._caller

    # -- hot path ------------------------------------------------------------------------------

    def get(self, name: str, version: int | None) -> ServingModel:
        entry = self._ready.get(name)
        if entry is None:
            if name in self._records:
                raise NotFoundError(
                    f"Request for unknown model: '{name}' has no available versions"
                )
            raise NotFoundError(f"Request for unknown model: '{name}' is not found")
        if version is None:
            return entry[1]
        serving = entry[0].get(version)
        if serving is None:
            raise NotFoundError(
                f"Request for unknown model: '{name}' version {version} is not found"
            )
        return serving

    async def acquire(self, name: str, version: int | None) -> ServingModel:
        """:meth:`get`, loading the model first in on-demand mode when it is not loaded."""
        loader = self._on_demand
        if loader is None:
            return self.get(name, version)
        if name not in self._ready:
            check_model_name(name)
            if name not in loader.loading():  # those joining a load under way need no scan
                dirs, problems = await asyncio.to_thread(self._scan)
                if name not in dirs:
                    return self.get(name, version)  # the unknown-model answer
                if name in problems:
                    raise NotFoundError(f"Request for unknown model: '{name}', {problems[name]}")
            await loader.ensure(name)
        loader.touch(name)
        return self.get(name, version)

    def on_demand_statistics(self) -> OnDemandStats | None:
        return self._on_demand.statistics() if self._on_demand is not None else None

    async def _load_on_demand(self, name: str) -> str:
        """Load ``name`` from the repository for the on-demand loader; its runtime's name."""
        dirs, problems = await asyncio.to_thread(self._scan)
        if name in problems:
            raise ModelLoadError(f"failed to load '{name}', {problems[name]}")
        await self._load(name, dirs.get(name))
        spec = self.get(name, None).spec
        return "ensemble" if spec.is_ensemble else spec.backend

    async def _evict(self, name: str, reason: str) -> None:
        """Unload ``name`` for the on-demand loader (the index shows ``reason``), the ensembles
        calling it, and the step models it loaded as an ensemble that no other loaded
        ensemble calls and the operator did not pin."""
        await self._unload(name)
        record = self._records.get(name)
        if record is not None:
            for version, status in list(record.status.items()):
                if status.state is ModelState.UNAVAILABLE:
                    record.move(version, ModelState.UNAVAILABLE, reason)
        await self._unload_dependents_of(name)
        pins = self._on_demand.settings.pins if self._on_demand is not None else frozenset()
        for step in self._ensembles.composing(name):
            users = [e for e in self._ensembles.dependents(step) if e in self._ready]
            if step in self._ready and step not in pins and not users:
                await self._evict(step, f"{reason} (a step of ensemble '{name}')")

    def _in_flight_by_model(self) -> dict[str, int]:
        """Each loaded model's requests in flight (all its versions)."""
        return {
            name: sum(int(getattr(lv.scheduler, "in_flight", 0)) for lv in r.loaded.values())
            for name, r in self._records.items()
            if r.loaded
        }

    async def _size_on_disk(self, name: str) -> int:
        dirs, _ = await asyncio.to_thread(self._scan)
        model_dir = dirs.get(name)
        return 0 if model_dir is None else await asyncio.to_thread(folder_bytes, model_dir)

    def ready_versions(self, name: str) -> list[int]:
        entry = self._ready.get(name)
        return sorted(entry[0]) if entry else []

    def all_ready(self) -> bool:
        return all(name in self._ready for name in self._expected)

    def load_failures(self) -> dict[str, int]:
        """Failed loads per model name since the server started: each version that failed
        to load (a failed reload of a version that keeps serving too), and each load that
        failed before any version (a bad config, a broken ensemble step, a duplicated name)."""
        return dict(self._load_failures)

    def _count_failure(self, name: str) -> None:
        self._load_failures[name] = self._load_failures.get(name, 0) + 1

    # -- index ---------------------------------------------------------------------------------

    def _scan(self) -> tuple[dict[str, Path], dict[str, str]]:
        """Model directories by name, and names that are broken (e.g. in two roots)."""
        found = find_models(self._roots)
        dirs = {name: paths[0] for name, paths in found.items()}
        problems = dict.fromkeys(duplicated(found), "model appears in two or more repositories")
        return dirs, problems

    async def index(self, *, ready_only: bool) -> list[IndexEntry]:
        """Every model of the repository with its versions' states; the scan of the
        repository's folders runs off the event loop."""
        dirs, _ = await asyncio.to_thread(self._scan)
        entries = index_entries(sorted(set(dirs) | set(self._records)), self._records, ready_only)
        loader = self._on_demand
        if loader is None:
            return entries
        return [replace(e, details=loader.details(e.name, e.name in self._ready)) for e in entries]

    # -- startup, load, unload -----------------------------------------------------------------

    async def startup(self, load_models: Iterable[str] = ()) -> dict[str, str]:
        """Load the models the control mode asks for; return failures by model name."""
        dirs, problems = await asyncio.to_thread(self._scan)
        wanted = list(load_models)
        if self._on_demand is not None:
            await self._on_demand.start()
            refused = await self._on_demand.preload(wanted, set(dirs), problems)
            for name in set(refused) & set(problems):
                self._mark_unavailable(name, problems[name])
            return refused
        if self._mode is ControlMode.EXPLICIT:
            names = sorted(dirs) if "*" in wanted else wanted
        else:
            names = sorted(dirs)
        self._expected = set(names)
        failures: dict[str, str] = {}
        for name, problem in problems.items():
            if name in self._expected:
                self._mark_unavailable(name, problem)
                failures[name] = problem

        async def one(name: str) -> None:
            if name in failures:
                return
            try:
                await self._ensembles.load_tracked(name, dirs.get(name))
            except InferdError as exc:
                failures[name] = str(exc)

        await asyncio.gather(*(one(n) for n in names))
        if self._mode is ControlMode.POLL:
            self._expected = set()  # poll mode readiness follows what loaded
        return failures

    def _mark_unavailable(self, name: str, reason: str) -> None:
        record = self._records.setdefault(name, ModelRecord(name))
        if record.status.get(MODEL_LEVEL) != VersionStatus(ModelState.UNAVAILABLE, reason):
            self._count_failure(name)  # once, not again at every poll that finds it
        record.move(MODEL_LEVEL, ModelState.UNAVAILABLE, reason)

    async def load(
        self, name: str, *, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        check_model_name(name)
        self._check_explicit()
        if config_json is not None:
            check_client_config(name, config_json)
        if files:
            await self._load_upload(name, config_json, files)
        else:
            dirs, problems = await asyncio.to_thread(self._scan)
            if name in problems:
                raise ModelLoadError(f"failed to load '{name}', {problems[name]}")
            await self._load(name, dirs.get(name), override_json=config_json)
        self._expected.add(name)

    def _check_explicit(self) -> None:
        if self._mode is ControlMode.ON_DEMAND:
            raise UnavailableError(
                "explicit model load / unload is not allowed in on-demand mode: a request "
                "loads its model, and the memory budget unloads idle ones"
            )
        if self._mode is not ControlMode.EXPLICIT:
            raise UnavailableError(
                "explicit model load / unload is not allowed if polling is enabled"
            )

    async def _load_upload(
        self, name: str, config_json: str | None, files: dict[str, bytes]
    ) -> None:
        parts = upload_parts(name, files)
        if config_json is None:
            raise InvalidArgumentError(
                f"failed to load '{name}', a 'config' parameter is required with file overrides"
            )
        try:
            config = parse_json_config(config_json, f"override for '{name}'")
        except InferdError as exc:
            raise InvalidArgumentError(f"failed to load '{name}', {exc}") from None
        await asyncio.to_thread(  # reads the files' bytes: off the loop
            check_upload_allowed,
            name,
            parts,
            config,
            self._registry.backend_name_for_platform,
            allow_model_upload=self._allow_model_upload,
            allow_code_upload=self._allow_code_upload,
        )
        model_dir = await asyncio.to_thread(self._uploads.write, name, parts)
        try:
            await self._load(name, model_dir, override_json=config_json, upload=True)
        except BaseException:
            if not self._owns_override(name, model_dir):
                self._uploads.remove(model_dir)
            raise

    def _owns_override(self, name: str, path: Path) -> bool:
        record = self._records.get(name)
        return record is not None and record.override_dir == path

    async def _load(
        self,
        name: str,
        model_dir: Path | None,
        *,
        override_json: str | None = None,
        upload: bool = False,
        unless_pinned: bool = False,
    ) -> None:
        if model_dir is None:
            raise NotFoundError(
                f"failed to load '{name}', failed to poll from model repository: no model "
                f"directory named '{name}' in the model repository"
            )
        record = self._records.setdefault(name, ModelRecord(name))
        try:  # an ensemble's step models first, outside the load gate they may need
            loaded = await self._ensembles.load_composing(
                name, model_dir, self._options.config_name, override_json
            )
            if self._mode is ControlMode.EXPLICIT:
                self._expected.update(loaded)
        except InferdError as exc:
            self._fail_all(record, str(exc))
            raise
        async with record.lock, self._load_gate:
            if unless_pinned and record.pin is not None:
                return  # pinned by a rollback while this poll's reload waited for the lock
            vet = None
            if upload and not self._allow_code_upload:
                vet = no_code_vet(name, self._registry.backend_name_for_platform)
            try:
                prepared = await asyncio.to_thread(
                    prepare,
                    name,
                    model_dir,
                    self._registry,
                    self._options,
                    override_json=override_json,
                    vet=vet,
                )
                if vet is not None:  # defence in depth: the effective config, after completion
                    vet(prepared.config)
            except InferdError as exc:
                self._fail_all(record, str(exc))
                raise
            await self._versions.swap_in(record, prepared)
            record.source = LoadSource(model_dir, override_json, upload)
            self._versions.unpin(record)  # a load applies the version policy again
            record.fingerprint = await asyncio.to_thread(fingerprint, model_dir)
            old_override = record.override_dir
            record.override_dir = model_dir if upload else None
            if old_override is not None and old_override != record.override_dir:
                self._uploads.remove(old_override)
        if self._on_change is not None:
            await self._on_change(name, model_dir)

    def _fail_all(self, record: ModelRecord, reason: str) -> None:
        """A failed (re)load: versions still serving stay READY; others become UNAVAILABLE."""
        self._count_failure(record.name)
        if record.loaded:
            return
        versions = [v for v in record.status if v != MODEL_LEVEL] or [MODEL_LEVEL]
        for version in versions:
            record.move(version, ModelState.UNAVAILABLE, reason)

    async def unload(self, name: str, *, unload_dependents: bool = False) -> None:
        check_model_name(name)
        self._check_explicit()
        await self._unload(name)
        self._expected.discard(name)
        await self._unload_dependents_of(name)
        if unload_dependents:
            # Triton's meaning: the models an ensemble is composed of are unloaded with it
            dependents = self._ensembles.composing(name)
            if not dependents:
                _log.info("unload of '%s': it is composed of no other model", name)
            for dependent in dependents:
                await self._unload(dependent)
                self._expected.discard(dependent)

    # -- ensembles -----------------------------------------------------------------------------

    def _is_ready(self, name: str) -> bool:
        return name in self._ready

    async def _model_dirs(self) -> dict[str, Path]:
        dirs, _ = await asyncio.to_thread(self._scan)
        return dirs

    async def _unload_dependents_of(self, name: str) -> None:
        """Ensembles calling ``name`` cannot serve once it is gone: unload them too, with a
        reason that says why (as Triton does)."""
        for ensemble in self._ensembles.dependents(name):
            record = self._records.get(ensemble)
            if record is None or not record.loaded:
                continue
            versions = list(record.loaded)
            await self._unload(ensemble)
            for version in versions:
                record.move(
                    version,
                    ModelState.UNAVAILABLE,
                    f"ensemble '{ensemble}' depends on '{name}' which has no loaded version",
                )
            await self._unload_dependents_of(ensemble)

    async def _unload(self, name: str) -> None:
        record = self._records.get(name)
        if record is None:
            # Triton's meaning: unloading a model that is not loaded (or not known) is a no-op
            _log.info("unload of '%s': it is not loaded", name)
            return
        async with record.lock:
            await self._versions.retire_all(record)
            self._remove_override(record)
            if self._recent is not None:
                self._recent.forget(name)
        if self._on_change is not None:
            await self._on_change(name, None)

    # -- rollback ------------------------------------------------------------------------------

    async def rollback(self, name: str, version: int | None = None) -> Pin:
        """Make ``version`` (default: the highest version below the default one) the model's
        default version, loading and warming it first if needed, then drain and unload the
        version it replaces; the model stays pinned there until :meth:`unpin` or a load."""
        check_model_name(name)
        if self._mode is ControlMode.NONE:
            raise refuse_in_mode_none("roll a model back")
        record = self._records.get(name)
        if record is None or not record.loaded:
            raise NotFoundError(f"cannot roll '{name}' back: it has no loaded version")
        async with record.lock:
            return await self._versions.roll_back(record, version)

    async def unpin(self, name: str) -> None:
        """Lift a rollback's pin: load the model again as its repository (and the last load
        request) says, under its version policy."""
        check_model_name(name)
        if self._mode is ControlMode.NONE:
            raise refuse_in_mode_none("unpin a model")
        record = self._records.get(name)
        if record is None or record.pin is None or record.source is None:
            raise InvalidArgumentError(
                f"model '{name}' is not pinned: no rollback chose its default version"
            )
        source = record.source
        await self._load(
            name, source.model_dir, override_json=source.override_json, upload=source.upload
        )

    def statistics(self, name: str, version: int | None) -> list[StatsSnapshot]:
        """Snapshots of READY versions: every model ("" name), one model, or one version."""
        return ready_statistics(self._ready, name, version)

    # -- polling -------------------------------------------------------------------------------

    async def poll_once(self) -> None:
        """Load new models, reload changed ones, unload removed ones (poll mode)."""
        dirs, problems = await asyncio.to_thread(self._scan)
        for name in sorted(set(self._records) - set(dirs)):
            if self._records[name].loaded:
                _log.info("model '%s' left the repository: unloading", name)
                await self._unload(name)
        for name, model_dir in sorted(dirs.items()):
            if name in problems:
                self._mark_unavailable(name, problems[name])
                continue
            record = self._records.get(name)
            if record is not None and record.pin is not None:
                _log.debug("poll: model '%s' is pinned by a rollback and left as it is", name)
                continue
            stamp = await asyncio.to_thread(fingerprint, model_dir)
            if record is not None and record.fingerprint == stamp:
                continue
            try:
                await self._load(name, model_dir, unless_pinned=True)
            except InferdError as exc:
                _log.error("poll: %s", exc)
                # the old versions, if any, keep serving; remember the stamp to avoid retrying
                self._records[name].fingerprint = stamp

    async def run_polling(self, period_s: float) -> None:
        while True:
            await asyncio.sleep(period_s)
            try:
                await self.poll_once()
            except Exception:
                _log.exception("polling the model repository failed")

    # -- shutdown ------------------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> bool:
        """Wait for in-flight requests of every version; False if the grace period ran out."""
        schedulers = [lv.scheduler for r in self._records.values() for lv in r.loaded.values()]
        if not schedulers:
            return True
        try:
            await asyncio.wait_for(
                asyncio.gather(*(s.drain() for s in schedulers)), timeout=timeout_s
            )
        except TimeoutError:
            self._grace_spent = True
            return False
        return True

    async def close(self) -> None:
        """Unload everything: each version drains its in-flight requests first, as an unload
        does (not again once :meth:`drain` ran out of its grace period)."""
        timeout_s = 0.0 if self._grace_spent else None
        if self._on_demand is not None:
            await self._on_demand.close()
        for name in list(self._records):
            record = self._records[name]
            await self._versions.retire_all(record, drain_timeout_s=timeout_s)
            self._remove_override(record)
        self._uploads.close()

    def _remove_override(self, record: ModelRecord) -> None:
        """Delete the folder an upload made for the model, if any."""
        if record.override_dir is not None:
            self._uploads.remove(record.override_dir)
            record.override_dir = None
