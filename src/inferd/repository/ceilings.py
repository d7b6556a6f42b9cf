"""Ceilings on what a model configuration may make the server build: instances, runtime threads,
batch and queue sizes, priority levels, sequence slots.

They are checked once the configuration is complete and before anything is built, so a refused
load starts no thread and opens no session. A configuration sent with a load request (the load
API's ``config`` parameter, over HTTP or gRPC, with or without files) is a client's: any value
above its ceiling refuses the load with INVALID_ARGUMENT (HTTP 400). The repository's own
``config.pbtxt`` is the operator's: there a value above a ceiling is honoured with a warning,
except for the ceilings that bound what the server allocates whatever the runtime (instances,
priority levels, sequence slots), which hold for every configuration.
"""

from __future__ import annotations

import logging
from collections.abc import Sized
from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup

from inferd.backends.threads import available_cores
from inferd.codecs.model_config import ModelConfig
from inferd.core.devices import instance_count
from inferd.errors import ConfigError

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_PREFERRED_BATCH_SIZES",
    "MAX_PRIORITY_LEVELS",
    "MAX_QUEUE_SIZE",
    "MAX_SEQUENCE_SLOTS",
    "THREADS_PER_CORE",
    "check_ceilings",
    "default_max_threads",
    "thread_parameters",
]

_log = logging.getLogger("inferd.repository")

#: runtime threads a model may ask for per core this process may use (--model-max-threads 0)
THREADS_PER_CORE = 4
#: max_batch_size a load request may set (the FIL examples' 32768 fits)
MAX_BATCH_SIZE = 65536
#: preferred_batch_size values a load request may list (each is also at most max_batch_size)
MAX_PREFERRED_BATCH_SIZES = 64
#: max_queue_size a load request may set for a priority level (0, no bound, stays accepted:
#: requests waiting are bounded by the connections and streams the front ends admit)
MAX_QUEUE_SIZE = 65536
#: dynamic_batching.priority_levels of any configuration (the batcher builds a queue per level)
MAX_PRIORITY_LEVELS = 1024
#: sequence slots of any configuration: instances x slots per instance (max_batch_size, or
#: max_candidate_sequences for the oldest strategy); the slot table is built up front
MAX_SEQUENCE_SLOTS = 65536

# parameters whose name says "thread" but which start none (FIL's GPU kernel shape)
_NOT_THREADS = frozenset({"threads_per_tree"})
# OpenVINO's streams each run on threads of their own
_THREAD_LIKE = frozenset({"NUM_STREAMS"})


def default_max_threads(cores: int | None = None) -> int:
    """The ceiling ``--model-max-threads 0`` stands for: :data:`THREADS_PER_CORE` x the cores
    this process may use (its CPU affinity, bounded by its cgroup's CPU quota)."""
    return THREADS_PER_CORE * (cores if cores is not None else available_cores())


def thread_parameters(config: ModelConfig) -> dict[str, int]:
    """The config ``parameters`` that size runtime thread pools (any name holding ``thread``,
    e.g. ``intra_op_thread_count``, ``INFERENCE_NUM_THREADS``, ``cpu_nthread``, and OpenVINO's
    ``NUM_STREAMS``) with a positive integer value; the runtime refuses other values itself."""
    found: dict[str, int] = {}
    for key in config.parameters:
        if key in _NOT_THREADS or ("thread" not in key.lower() and key not in _THREAD_LIKE):
            continue
        try:
            value = int(config.parameters[key].string_value.strip())
        except ValueError:
            continue
        if value > 0:
            found[key] = value
    return found


@dataclass(frozen=True, slots=True)
class _Excess:
    what: str  # the field, as the config names it
    asked: str  # the value, with its meaning
    ceiling: int
    soft: bool  # the repository's own config may pass it (with a warning)
    raise_with: str  # how the operator raises the ceiling


def check_ceilings(
    config: ModelConfig,
    *,
    max_instances: int,
    max_threads: int,
    from_request: bool,
) -> None:
    """Refuse ``config`` (complete and normalised) with :class:`ConfigError` where it passes a
    ceiling; ``from_request``: it came with a load request (every ceiling is then refused),
    else from the repository (soft ceilings are only logged). ``max_threads`` 0 stands for
    :func:`default_max_threads`."""
    for excess in _excesses(config, max_instances, max_threads or default_max_threads()):
        asked = f"model '{config.name}': {excess.what} asks for {excess.asked}"
        if from_request or not excess.soft:
            where = "a load request's configuration" if from_request else "a configuration"
            raise ConfigError(
                f"{asked}, more than the {excess.ceiling} {where} may ask for; {excess.raise_with}"
            )
        _log.warning(
            "%s, more than the %d a load request may ask for; honoured, as the repository's "
            "own configuration",
            asked,
            excess.ceiling,
        )


_REPOSITORY = (
    "set it in the model's config.pbtxt in the repository instead (the operator's "
    "configuration may pass this ceiling; the server logs a warning)"
)


def _excesses(config: ModelConfig, max_instances: int, max_threads: int) -> list[_Excess]:
    found: list[_Excess] = []
    instances = (  # a KIND_GPU group makes count instances on each listed GPU
        sum(
            instance_count(ModelInstanceGroup.Kind.Name(group.kind), group.count, tuple(group.gpus))
            for group in config.instance_group
        )
        or 1
    )
    if config.instance_group and instances > max_instances:
        found.append(
            _Excess(
                "instance_group",
                f"{instances} instances",
                max_instances,
                False,
                "the server allows more with --model-max-instances",
            )
        )
    for key, value in thread_parameters(config).items():
        total = value * instances
        if total > max_threads:
            found.append(
                _Excess(
                    f"parameter '{key}'",
                    f"{value} threads on each of {instances} instance(s) ({total} in all)",
                    max_threads,
                    True,
                    f"the server allows more with --model-max-threads (default "
                    f"{THREADS_PER_CORE} per core this process may use), or {_REPOSITORY}",
                )
            )
    mbs = int(config.max_batch_size)
    if mbs > MAX_BATCH_SIZE:
        found.append(_Excess("max_batch_size", str(mbs), MAX_BATCH_SIZE, True, _REPOSITORY))
    scheduling = config.WhichOneof("scheduling_choice")
    if scheduling == "dynamic_batching":
        found.extend(_dynamic_excesses(config))
    elif scheduling == "sequence_batching":
        seq = config.sequence_batching
        oldest = seq.WhichOneof("strategy_choice") == "oldest"
        per_instance = max(1, mbs)
        if oldest and seq.oldest.max_candidate_sequences > 0:
            per_instance = int(seq.oldest.max_candidate_sequences)
        if oldest:
            found.extend(_preferred(seq.oldest.preferred_batch_size, "sequence_batching.oldest"))
        slots = per_instance * instances
        if slots > MAX_SEQUENCE_SLOTS:
            found.append(
                _Excess(
                    "sequence_batching",
                    f"{slots} sequence slots ({per_instance} on each of {instances} instance(s))",
                    MAX_SEQUENCE_SLOTS,
                    False,
                    "this bound is fixed: fewer instances or a smaller "
                    + ("max_candidate_sequences" if oldest else "max_batch_size"),
                )
            )
    return found


def _dynamic_excesses(config: ModelConfig) -> list[_Excess]:
    db = config.dynamic_batching
    found = _preferred(db.preferred_batch_size, "dynamic_batching")
    levels = int(db.priority_levels)
    if levels > MAX_PRIORITY_LEVELS:
        found.append(
            _Excess(
                "dynamic_batching.priority_levels",
                f"{levels} levels",
                MAX_PRIORITY_LEVELS,
                False,
                "this bound is fixed",
            )
        )
    policies = [("dynamic_batching.default_queue_policy", db.default_queue_policy)]
    policies += [
        (f"dynamic_batching.priority_queue_policy[{level}]", db.priority_queue_policy[level])
        for level in sorted(db.priority_queue_policy)
    ]
    for field, policy in policies:
        size = int(policy.max_queue_size)
        if size > MAX_QUEUE_SIZE:
            found.append(
                _Excess(f"{field}.max_queue_size", str(size), MAX_QUEUE_SIZE, True, _REPOSITORY)
            )
    return found


def _preferred(sizes: Sized, field: str) -> list[_Excess]:
    count = len(sizes)
    if count <= MAX_PREFERRED_BATCH_SIZES:
        return []
    return [
        _Excess(
            f"{field}.preferred_batch_size",
            f"{count} sizes",
            MAX_PREFERRED_BATCH_SIZES,
            True,
            _REPOSITORY,
        )
    ]
