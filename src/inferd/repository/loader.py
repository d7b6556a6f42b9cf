"""Turning a model directory into READY serving versions (blocking work, run off the loop)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from inferd.backends.base import LoadContext, LoadedModel, ModelInstance, ThreadCalls
from inferd.backends.registry import BackendRegistry
from inferd.backends.text_encoder import is_text_encoder, load_text_encoder
from inferd.codecs.model_config import ModelConfig, spec_from_proto
from inferd.core.devices import instance_count, runtime_has_cuda, visible_gpu_count
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.core.sequence_spec import execution_spec
from inferd.errors import (
    ConfigError,
    ErrorCode,
    InferdError,
    InvalidArgumentError,
    ModelLoadError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
    UnsupportedError,
)
from inferd.repository.autocomplete import complete_config
from inferd.repository.ceilings import check_ceilings
from inferd.repository.config import read_model_config
from inferd.repository.features import check_supported
from inferd.repository.layout import list_versions
from inferd.repository.manager_types import Scheduler, ServingModel
from inferd.repository.normalize import normalize_and_validate
from inferd.repository.paths import check_config_paths, model_file_inside, resolve_inside
from inferd.repository.warmup import warm_up, warm_up_with_requests
from inferd.scheduling.direct import DirectScheduler
from inferd.scheduling.dynamic import DynamicBatcher
from inferd.scheduling.ensemble_graph import build_graph
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.pinned import PinnedPools
from inferd.scheduling.response_cache import check_model_cache
from inferd.scheduling.sequence import SequenceBatcher
from inferd.scheduling.state import check_initial_states
from inferd.scheduling.stats import ModelStats

_log = logging.getLogger("inferd.repository")


@dataclass(frozen=True, slots=True)
class LoadOptions:
    auto_complete: bool = True
    config_name: str | None = None
    default_max_batch_size: int = 4
    # instances one model version may ask for (each may be a thread, a process, an arena)
    max_instances: int = 64
    # runtime threads (each *thread* parameter x the instances) one model version may ask for;
    # 0: 4 x the cores this process may use (repository/ceilings.py)
    max_threads: int = 0
    # a batch expected to run within this many microseconds runs on the event loop thread
    # (runtimes that allow it; 0: always on the instance threads)
    inline_max_us: int = 100
    # the server has a response cache: models may enable response_cache
    response_cache: bool = False
    # the server holds its models within a memory budget (LoadContext.bounded_memory)
    bounded_memory: bool = False


@dataclass(slots=True)
class PreparedModel:
    """The completed configuration of a model and the versions its policy selects."""

    spec: ModelSpec
    model_dir: Path
    versions: list[int]
    config: ModelConfig  # the normalised message: the repository's checks read it


@dataclass(slots=True)
class LoadedVersion:
    serving: ServingModel
    loaded: LoadedModel | None  # None for a model with no runtime (an ensemble)
    pool: InstancePool | PinnedPools | None
    scheduler: Scheduler

    def close(self) -> None:
        """Stop the instance threads, then release the model once no instance is running
        (blocking for a bounded time; call off the loop)."""
        if self.pool is not None:
            self.pool.close(then=self._release)

    def _release(self) -> None:
        try:
            if self.loaded is not None:
                self.loaded.close()
        except Exception:
            _log.exception("closing model '%s' failed", self.serving.spec.name)


def select_versions(proto: ModelConfig, available: list[int]) -> list[int]:
    """Apply the config's version policy to the version directories present."""
    policy = proto.version_policy
    which = policy.WhichOneof("policy_choice")
    ordered = sorted(available)
    if which == "all":
        return ordered
    if which == "specific":
        return sorted(set(int(v) for v in policy.specific.versions))
    count = policy.latest.num_versions if which == "latest" else 1
    return ordered[-max(count, 1) :]


# the class that keeps an error's code when its message gains the "failed to load" prefix
_BY_CODE: dict[ErrorCode, type[InferdError]] = {
    ErrorCode.INVALID_ARGUMENT: InvalidArgumentError,
    ErrorCode.NOT_FOUND: NotFoundError,
    ErrorCode.UNAVAILABLE: UnavailableError,
    ErrorCode.UNSUPPORTED: UnsupportedError,
    ErrorCode.PERMISSION_DENIED: PermissionDeniedError,
}


def load_failure(name: str, exc: InferdError) -> InferdError:
    """``exc`` as a load failure of model ``name``: same code, message prefixed as Triton's."""
    return _BY_CODE.get(exc.code, ModelLoadError)(f"failed to load '{name}', {exc}")


def prepare(
    name: str,
    model_dir: Path,
    registry: BackendRegistry,
    options: LoadOptions,
    *,
    override_json: str | None = None,
    vet: Callable[[ModelConfig], None] | None = None,
) -> PreparedModel:
    """Read, auto-complete, normalise and validate the config; choose the versions to serve.

    ``vet`` sees the config once its backend is known, before the backend opens any file (the
    repository refuses an uploaded model that runs code there)."""
    available = list_versions(model_dir)
    if not available:
        raise ModelLoadError(f"failed to load '{name}', no version is available")
    try:
        proto = read_model_config(
            model_dir, config_name=options.config_name, override_json=override_json
        )
        # before auto-complete, which opens default_model_filename; again after it
        if not proto.name:
            proto.name = name  # as normalisation will; the checks' messages name the model
        check_config_paths(proto)
        complete_config(
            proto,
            model_dir,
            available,
            registry,
            auto_complete=options.auto_complete,
            default_max_batch_size=options.default_max_batch_size,
            vet=vet,
        )
        check_config_paths(proto)
        gpus = visible_gpu_count()
        auto_gpu = gpus > 0 and runtime_has_cuda(proto.backend)
        normalize_and_validate(proto, model_dir, gpu_count=gpus, auto_gpu=auto_gpu)
        cache_warning = check_model_cache(proto, options.response_cache)
        if cache_warning:
            _log.warning("%s", cache_warning)
        check_supported(proto)
        check_ceilings(  # before anything is built: a refused load starts no thread
            proto,
            max_instances=options.max_instances,
            max_threads=options.max_threads,
            from_request=override_json is not None,
        )
        spec = spec_from_proto(proto)
        check_initial_states(spec.sequence_batching, model_dir)
        if spec.is_ensemble or spec.ensemble_steps:
            build_graph(spec)  # the steps' own configs are checked once they are loaded
    except InferdError as exc:
        raise load_failure(name, exc) from exc
    versions = select_versions(proto, available)
    # Triton's meaning: a specific version without a folder is logged and skipped; the model
    # fails only when no version is left to serve
    for v in versions:
        if v not in available:
            _log.error(
                "version %d is specified for model '%s', but the version directory is not present",
                v,
                name,
            )
    versions = [v for v in versions if v in available]
    if not versions:
        raise InvalidArgumentError(
            f"failed to load '{name}', at least one version must be available under the version "
            f"policy of model '{name}'"
        )
    return PreparedModel(spec=spec, model_dir=model_dir, versions=versions, config=proto)


def read_labels(spec: ModelSpec, model_dir: Path) -> dict[str, list[str]]:
    labels: dict[str, list[str]] = {}
    for out in spec.outputs:
        if out.label_filename:
            path = resolve_inside(
                model_dir, out.label_filename, f"output '{out.name}' label_filename"
            )
            try:
                labels[out.name] = path.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise ConfigError(
                    f"label file '{path}' of output '{out.name}' cannot be read: {exc}"
                ) from exc
    return labels


def load_version(
    prepared: PreparedModel,
    version: int,
    registry: BackendRegistry,
    loop: asyncio.AbstractEventLoop,
    stats: ModelStats | None = None,
    *,
    inline_max_us: int = 0,
    calls: ThreadCalls | None = None,
    recent: Sequence[InferRequest] = (),
    bounded_memory: bool = False,
) -> LoadedVersion:
    """Load one version and start its instances. Blocking.

    ``stats`` carries the version's statistics over from an earlier load of the same version,
    so the counters clients and metrics read never go backwards across a reload. The instances
    are warmed up before the version is returned: with the config's ``model_warmup``, or, when
    it has none, with ``recent`` (requests the model answered lately).
    """
    spec = prepared.spec
    name = spec.name
    try:
        backend = registry.for_spec(spec)
        filename = spec.default_model_filename or backend.default_model_filename
        if filename:  # confined as label and warm-up files are: a symlink out is refused
            model_file_inside(
                prepared.model_dir / str(version),
                filename,
                f"model '{name}': default_model_filename",
            )
        ctx = LoadContext(
            spec=execution_spec(spec),  # a sequence model's runtime also gets controls, state
            version=version,
            model_dir=prepared.model_dir,
            version_dir=prepared.model_dir / str(version),
            calls=calls,
            bounded_memory=bounded_memory,
        )
        if is_text_encoder(spec):  # tokenizer files only from the model's folder, confined
            tokenizer = resolve_inside(
                prepared.model_dir, spec.parameters["tokenizer"], "parameter 'tokenizer'"
            )
            loaded = load_text_encoder(backend, ctx, tokenizer)
        else:
            loaded = backend.load(ctx)
    except ModelLoadError:
        raise
    except InferdError as exc:
        raise ModelLoadError(f"failed to load '{name}' version {version}: {exc}") from exc
    except Exception as exc:
        raise ModelLoadError(f"failed to load '{name}' version {version}: {exc}") from exc
    instances: list[ModelInstance] = []
    try:
        for group in spec.instance_groups:
            for index in range(instance_count(group.kind, group.count, group.gpus)):
                instances.append(loaded.create_instance(group, index))
        labels = read_labels(spec, prepared.model_dir)
        warm_up(spec, instances, prepared.model_dir)
        if recent and not spec.warmups and spec.sequence_batching is None:
            ran = warm_up_with_requests(spec, instances, recent)
            _log.info(
                "model '%s' version %d warmed up with %d recent request(s)", name, version, ran
            )
    except Exception as exc:
        for instance in instances:
            instance.close()
        loaded.close()
        raise ModelLoadError(f"failed to load '{name}' version {version}: {exc}") from exc
    if stats is None:
        stats = ModelStats(name, version)
    stats.response_cache = spec.response_cache  # prepare() refused it without a server cache
    pool: InstancePool | PinnedPools
    scheduler: DirectScheduler | DynamicBatcher | SequenceBatcher
    if spec.sequence_batching is not None:
        pool = PinnedPools(
            f"{name}-{version}", instances, stats, loop, inline_bound_ns=inline_max_us * 1000
        )
        scheduler = SequenceBatcher(spec, pool, stats, prepared.model_dir)
    elif spec.dynamic_batching is not None and spec.max_batch_size > 0:
        pool = InstancePool(
            f"{name}-{version}", instances, stats, loop, inline_bound_ns=inline_max_us * 1000
        )
        scheduler = DynamicBatcher(spec, pool, stats)
    else:
        pool = InstancePool(
            f"{name}-{version}", instances, stats, loop, inline_bound_ns=inline_max_us * 1000
        )
        scheduler = DirectScheduler(pool, stats)
    serving = ServingModel(
        spec=spec,
        version=version,
        scheduler=scheduler,
        stats=stats,
        labels=labels,
        cache_epoch=time.monotonic_ns(),
    )
    return LoadedVersion(serving=serving, loaded=loaded, pool=pool, scheduler=scheduler)
