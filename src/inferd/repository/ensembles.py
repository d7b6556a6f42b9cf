"""Ensembles in the repository: which models an ensemble needs, and serving a loaded one.

An ensemble has no runtime: a loaded ensemble version is its checked graph and an
:class:`EnsembleScheduler` that calls the step models in process. Its step models must be READY
first; the manager loads them (``composing_models`` reads their names from the config).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path

from inferd.core.calls import ModelCaller
from inferd.core.model_spec import ModelSpec
from inferd.errors import ConfigError, InferdError, UnsupportedError
from inferd.repository.calls import InProcessCaller
from inferd.repository.config import read_model_config
from inferd.repository.loader import LoadedVersion, PreparedModel, read_labels
from inferd.repository.manager_types import ServingModel
from inferd.scheduling.ensemble import EnsembleScheduler
from inferd.scheduling.ensemble_decoupled import trace_origins
from inferd.scheduling.ensemble_graph import build_graph, check_step_models
from inferd.scheduling.ensemble_shapes import plan_reshapes
from inferd.scheduling.stats import ModelStats

__all__ = [
    "ENSEMBLE_PLATFORM",
    "EnsembleDependencies",
    "composing_models",
    "load_ensemble_version",
]

ENSEMBLE_PLATFORM = "ensemble"


def composing_models(
    model_dir: Path, *, config_name: str | None = None, override_json: str | None = None
) -> tuple[str, ...]:
    """The models an ensemble's config calls, in step order ( () for a model that is not an
    ensemble, or whose config does not parse: loading it then reports the problem). Blocking."""
    try:
        config = read_model_config(model_dir, config_name=config_name, override_json=override_json)
    except InferdError:
        return ()
    if config.platform != ENSEMBLE_PLATFORM:
        return ()
    names = (step.model_name for step in config.ensemble_scheduling.step if step.model_name)
    return tuple(dict.fromkeys(names))


def load_ensemble_version(
    prepared: PreparedModel,
    version: int,
    stats: ModelStats,
    get: Callable[[str, int | None], ServingModel],
    call: ModelCaller,
) -> LoadedVersion:
    """Serve one version of an ensemble whose step models are loaded: check every step against
    the configuration of the version it will call, then build its scheduler."""
    spec = prepared.spec
    name = spec.name
    graph = build_graph(spec)
    models: dict[str, ModelSpec] = {}
    serving: list[ServingModel] = []
    try:
        for step in graph.steps:
            try:
                serving.append(get(step.model_name, step.model_version))
                models[step.model_name] = serving[-1].spec
            except InferdError:
                if step.model_version is None:
                    raise ConfigError(
                        f"ensemble '{name}' depends on '{step.model_name}' which has no loaded "
                        "version"
                    ) from None
                raise ConfigError(
                    f"ensemble '{name}' depends on '{step.model_name}' whose required version "
                    f"{step.model_version} is not loaded"
                ) from None
        check_step_models(graph, spec, models)
        origins = trace_origins(graph, models)
        if origins.decoupled and not isinstance(call, InProcessCaller):
            raise UnsupportedError(
                f"ensemble '{name}' has decoupled steps, which this server cannot stream"
            )
    except InferdError as exc:
        raise type(exc)(f"failed to load '{name}', {exc}") from exc
    step_specs = [s.spec for s in serving]
    if origins.decoupled:  # as Triton: an ensemble with decoupled steps is decoupled
        policy = {**spec.config.get("model_transaction_policy", {}), "decoupled": True}
        config = {**spec.config, "model_transaction_policy": policy}
        spec = dataclasses.replace(spec, decoupled=True, config=config)
    scheduler = EnsembleScheduler(
        graph,
        call,
        stats,
        step_specs=step_specs,
        batching=spec.max_batch_size > 0,
        reshapes=plan_reshapes(graph, spec, step_specs),
        origins=origins,
        stream=call.stream_outputs if isinstance(call, InProcessCaller) else None,
    )
    labels = _labels(prepared, serving)
    model = ServingModel(
        spec=spec, version=version, scheduler=scheduler, stats=stats, labels=labels
    )
    return LoadedVersion(serving=model, loaded=None, pool=None, scheduler=scheduler)


def _labels(prepared: PreparedModel, steps: list[ServingModel]) -> dict[str, list[str]]:
    """The class labels of the ensemble's outputs, as Triton completes them: an output's own
    ``label_filename`` first, else the labels of the step model output that writes it."""
    labels = read_labels(prepared.spec, prepared.model_dir)
    wanted = {t.name for t in prepared.spec.outputs} - set(labels)
    for step, model in zip(prepared.spec.ensemble_steps, steps, strict=True):
        for model_output, tensor in step.output_map.items():
            found = model.labels.get(model_output)
            if tensor in wanted and found:
                labels[tensor] = found
    return labels


class EnsembleDependencies:
    """Which models each ensemble calls, and loading them before the ensemble.

    ``load`` loads one model from its directory (the manager's own load); every load that goes
    through :meth:`load_tracked` is remembered while it runs, so an ensemble waiting for a step
    model that is already loading waits for that load instead of starting a second one.
    """

    def __init__(
        self,
        load: Callable[[str, Path | None], Awaitable[None]],
        is_ready: Callable[[str], bool],
        model_dirs: Callable[[], Awaitable[dict[str, Path]]],
    ) -> None:
        self._load = load
        self._is_ready = is_ready
        self._model_dirs = model_dirs
        self._loading: dict[str, asyncio.Future[None]] = {}
        self._composing: dict[str, tuple[str, ...]] = {}

    def composing(self, name: str) -> tuple[str, ...]:
        """The models ensemble ``name`` calls (as of its last load; () for other models)."""
        return self._composing.get(name, ())

    def dependents(self, name: str) -> list[str]:
        """The ensembles that call ``name`` directly."""
        return [ensemble for ensemble, needed in self._composing.items() if name in needed]

    async def load_tracked(self, name: str, model_dir: Path | None) -> None:
        """Load ``name``, or wait for its load already under way."""
        pending = self._loading.get(name)
        if pending is None:
            pending = asyncio.ensure_future(self._load(name, model_dir))
            self._loading[name] = pending
            pending.add_done_callback(lambda done: self._forget(name, done))
        await asyncio.shield(pending)

    def _forget(self, name: str, done: asyncio.Future[None]) -> None:
        if self._loading.get(name) is done:
            del self._loading[name]
        if not done.cancelled():
            done.exception()  # retrieved here: whoever awaited the load has reported it

    def _calls(self, start: str, target: str) -> bool:
        """Whether ``start`` calls ``target``, directly or through other ensembles."""
        seen: set[str] = set()
        stack = [start]
        while stack:
            current = stack.pop()
            if current == target:
                return True
            if current not in seen:
                seen.add(current)
                stack.extend(self._composing.get(current, ()))
        return False

    async def load_composing(
        self, name: str, model_dir: Path, config_name: str | None, override_json: str | None
    ) -> list[str]:
        """Make every model that ``name``'s ensemble config calls READY, loading those that are
        not (in every control mode, as Triton loads an ensemble's models with it); return the
        ones loaded here. Raises naming the first step model that cannot be loaded."""
        needed = await asyncio.to_thread(
            composing_models, model_dir, config_name=config_name, override_json=override_json
        )
        self._composing[name] = needed
        loaded: list[str] = []
        dirs: dict[str, Path] | None = None
        for dep in needed:
            if self._calls(dep, name):
                detail = (
                    f"ensemble '{name}' calls itself"
                    if dep == name
                    else f"circular dependency: ensemble '{name}' calls '{dep}', which calls "
                    f"'{name}'"
                )
                raise ConfigError(f"failed to load '{name}', {detail}")
            if self._is_ready(dep) and dep not in self._loading:
                continue
            if dirs is None:
                dirs = await self._model_dirs()
            try:
                await self.load_tracked(dep, dirs.get(dep))
            except InferdError as exc:
                raise ConfigError(
                    f"failed to load '{name}', ensemble '{name}' depends on '{dep}' which has "
                    f"no loaded version: {exc}"
                ) from exc
            loaded.append(dep)
        return loaded
