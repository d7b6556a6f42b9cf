"""Defaults Triton applies to every loaded config, then validation (PROTOCOL.md §5.6).

After :func:`normalize_and_validate` the config is what the ``/config`` endpoints return and
what :func:`inferd.codecs.model_config.spec_from_proto` turns into the hot-path view.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from inferd.codecs.model_config import ModelConfig
from inferd.core.datatypes import BY_CONFIG_NAME
from inferd.errors import ConfigError
from inferd.repository.paths import resolve_inside

DEFAULT_MAX_SEQUENCE_IDLE_US = 1_000_000
ENSEMBLE_PLATFORM = "ensemble"

_KIND_AUTO = mc.ModelInstanceGroup.Kind.Value("KIND_AUTO")
_KIND_GPU = mc.ModelInstanceGroup.Kind.Value("KIND_GPU")
_KIND_CPU = mc.ModelInstanceGroup.Kind.Value("KIND_CPU")


def normalize_and_validate(
    config: ModelConfig, model_dir: Path, *, gpu_count: int = 0, auto_gpu: bool | None = None
) -> None:
    """Apply Triton's defaults to ``config`` in place, then validate it.

    ``gpu_count`` is the number of GPUs this process may use
    (:func:`inferd.core.devices.visible_gpu_count`). ``auto_gpu`` says whether ``KIND_AUTO``
    groups (and models without instance groups) run on them: only where the model's runtime
    can compute on a GPU (:func:`inferd.core.devices.runtime_has_cuda`); None means "when there
    are GPUs". ``KIND_GPU`` groups without ``gpus`` get all of them, and a ``KIND_GPU`` group
    is refused when there are none or when it names a GPU that is not there.
    Raises :class:`ConfigError` naming the offending field.
    """
    _normalize(config, model_dir, gpu_count, gpu_count > 0 if auto_gpu is None else auto_gpu)
    _validate(config, model_dir)
    _validate_gpus(config, gpu_count)


# -- normalisation ------------------------------------------------------------------------------


def _normalize(config: ModelConfig, model_dir: Path, gpu_count: int, auto_gpu: bool) -> None:
    dir_name = model_dir.name
    if not config.name:
        config.name = dir_name
    elif config.name != dir_name:
        raise ConfigError(
            f"model configuration name '{config.name}' does not match the model directory "
            f"name '{dir_name}'"
        )
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    mbs = config.max_batch_size
    scheduling = config.WhichOneof("scheduling_choice")
    if (
        scheduling == "dynamic_batching"
        and mbs > 0
        and not config.dynamic_batching.preferred_batch_size
    ):
        config.dynamic_batching.preferred_batch_size.append(mbs)
    if scheduling == "sequence_batching":
        seq = config.sequence_batching
        if seq.max_sequence_idle_microseconds == 0:
            seq.max_sequence_idle_microseconds = DEFAULT_MAX_SEQUENCE_IDLE_US
        oldest = seq.WhichOneof("strategy_choice") == "oldest"
        if oldest and mbs > 0 and not seq.oldest.preferred_batch_size:
            seq.oldest.preferred_batch_size.append(mbs)
    is_ensemble = config.platform == ENSEMBLE_PLATFORM
    if not is_ensemble:
        opt = config.optimization
        if not opt.HasField("input_pinned_memory"):
            opt.input_pinned_memory.enable = True
        if not opt.HasField("output_pinned_memory"):
            opt.output_pinned_memory.enable = True
        _normalize_instance_groups(config, gpu_count, auto_gpu)
    # Triton always reports these two; setting the (empty) messages makes them print.
    config.model_transaction_policy.SetInParent()
    config.response_cache.SetInParent()


# runtimes that release the GIL while computing: two CPU instances by default keep both of a
# small machine's cores busy (their threads share the cores, see default_intra_op_threads)
_PARALLEL_BACKENDS = frozenset({"onnxruntime", "openvino", "pytorch", "fil"})
DEFAULT_CPU_INSTANCES = 2


def _normalize_instance_groups(config: ModelConfig, gpu_count: int, auto_gpu: bool) -> None:
    auto_gpu = auto_gpu and gpu_count > 0
    groups = config.instance_group
    if not groups:
        group = groups.add()
        if not auto_gpu and config.backend in _PARALLEL_BACKENDS:
            group.kind = _KIND_CPU
            group.count = min(DEFAULT_CPU_INSTANCES, os.cpu_count() or 1)
    several = len(groups) > 1
    for index, group in enumerate(groups):
        if not group.name:
            group.name = f"{config.name}_{index}" if several else config.name
        if group.kind == _KIND_AUTO:
            group.kind = _KIND_GPU if auto_gpu else _KIND_CPU
        if group.count < 1:
            group.count = 1
        if group.kind == _KIND_GPU and gpu_count > 0 and not group.gpus:
            group.gpus.extend(range(gpu_count))


# -- validation ---------------------------------------------------------------------------------


def _validate(config: ModelConfig, model_dir: Path) -> None:
    name = config.name
    mbs = config.max_batch_size
    if mbs < 0:
        raise ConfigError(f"model '{name}': max_batch_size must be >= 0, got {mbs}")
    policy = config.version_policy
    if policy.WhichOneof("policy_choice") == "latest" and policy.latest.num_versions < 1:
        raise ConfigError(
            f"model '{name}': version_policy.latest.num_versions must be >= 1, got "
            f"{policy.latest.num_versions}"
        )
    is_ensemble = config.platform == ENSEMBLE_PLATFORM
    _validate_tensors(config, "input", config.input)
    _validate_tensors(config, "output", config.output)
    _validate_labels(config, model_dir)
    scheduling = config.WhichOneof("scheduling_choice")
    if scheduling == "dynamic_batching":
        _validate_dynamic_batching(config)
    if scheduling == "sequence_batching" and mbs > 0:
        seq = config.sequence_batching
        if seq.WhichOneof("strategy_choice") == "oldest":
            _check_preferred(name, "sequence_batching.oldest", seq.oldest.preferred_batch_size, mbs)
    if is_ensemble and len(config.instance_group) > 0:
        raise ConfigError(f"ensemble model '{name}' must not have an instance_group")


def _validate_gpus(config: ModelConfig, gpu_count: int) -> None:
    """``KIND_GPU`` groups need a GPU, and only the GPUs that are there."""
    name = config.name
    for group in config.instance_group:
        if group.kind != _KIND_GPU:
            continue
        if gpu_count == 0:
            raise ConfigError(
                f"model '{name}': instance group '{group.name}' requests KIND_GPU but no GPU "
                "is available (NVML finds none, or CUDA_VISIBLE_DEVICES hides them); use "
                "KIND_CPU on this machine"
            )
        for gpu in group.gpus:
            if gpu < 0 or gpu >= gpu_count:
                raise ConfigError(
                    f"model '{name}': instance group '{group.name}' names GPU {gpu} but this "
                    f"machine has {gpu_count} visible GPU(s), numbered 0 to {gpu_count - 1}"
                )


def _validate_tensors(config: ModelConfig, kind: str, tensors: Iterable[Any]) -> None:
    name = config.name
    seen: set[str] = set()
    for index, tensor in enumerate(tensors):
        if not tensor.name:
            raise ConfigError(f"model '{name}': {kind}[{index}] must specify a 'name'")
        where = f"model '{name}': {kind} '{tensor.name}'"
        if tensor.name in seen:
            raise ConfigError(f"model '{name}': {kind} name '{tensor.name}' appears more than once")
        seen.add(tensor.name)
        type_name = mc.DataType.Name(tensor.data_type)
        if type_name == "TYPE_INVALID":
            raise ConfigError(f"{where} must specify a valid 'data_type'")
        if type_name not in BY_CONFIG_NAME:
            raise ConfigError(f"{where} has unsupported data_type {type_name}")
        dims = list(tensor.dims)
        if not dims:
            raise ConfigError(
                f"{where} must specify 'dims' (use dims: [ 1 ] with reshape: {{ shape: [ ] }} "
                "for a scalar)"
            )
        _check_dims(where, "dims", dims)
        if tensor.HasField("reshape"):
            shape = list(tensor.reshape.shape)
            _check_dims(where, "reshape", shape)
            _check_reshape(where, dims, shape)
            if not shape and config.max_batch_size == 0:
                raise ConfigError(
                    f"{where} has an empty reshape, which is only allowed when the model batches"
                )


def _check_dims(where: str, field: str, dims: list[int]) -> None:
    for d in dims:
        if d == 0 or d < -1:
            raise ConfigError(
                f"{where}: {field} {dims} has an invalid dimension {d}; each must be >= 1, or -1 "
                "for a variable-size dimension"
            )


def _check_reshape(where: str, dims: list[int], shape: list[int]) -> None:
    variable_dims = dims.count(-1)
    variable_shape = shape.count(-1)
    if variable_dims != variable_shape:
        raise ConfigError(
            f"{where}: reshape {shape} must have as many variable-size dimensions as dims {dims}"
        )
    if variable_dims == 0 and _product(dims) != _product(shape):
        raise ConfigError(
            f"{where}: reshape {shape} has {_product(shape)} elements but dims {dims} has "
            f"{_product(dims)}"
        )


def _product(values: list[int]) -> int:
    result = 1
    for v in values:
        result *= v
    return result


def _validate_labels(config: ModelConfig, model_dir: Path) -> None:
    for output in config.output:
        if not output.label_filename:
            continue
        what = f"model '{config.name}': output '{output.name}' label_filename"
        path = resolve_inside(model_dir, output.label_filename, what)
        if not path.is_file():
            raise ConfigError(f"{what} '{output.label_filename}' does not name a file")


def _check_preferred(name: str, field: str, sizes: Iterable[int], mbs: int) -> None:
    for size in sizes:
        if size < 1 or size > mbs:
            raise ConfigError(
                f"model '{name}': {field}.preferred_batch_size {size} must be between 1 and "
                f"max_batch_size {mbs}"
            )


def _validate_dynamic_batching(config: ModelConfig) -> None:
    name = config.name
    mbs = config.max_batch_size
    db = config.dynamic_batching
    if mbs == 0:
        raise ConfigError(
            f"model '{name}': dynamic_batching requires max_batch_size > 0 (the model must "
            "support batching)"
        )
    _check_preferred(name, "dynamic_batching", db.preferred_batch_size, mbs)
    levels = db.priority_levels
    if levels > 0:
        if not 1 <= db.default_priority_level <= levels:
            raise ConfigError(
                f"model '{name}': dynamic_batching.default_priority_level must be in [1, "
                f"{levels}], got {db.default_priority_level}"
            )
        for level in db.priority_queue_policy:
            if not 1 <= level <= levels:
                raise ConfigError(
                    f"model '{name}': dynamic_batching.priority_queue_policy has level {level} "
                    f"outside [1, {levels}]"
                )
    elif db.priority_queue_policy:
        raise ConfigError(
            f"model '{name}': dynamic_batching.priority_queue_policy requires priority_levels > 0"
        )
