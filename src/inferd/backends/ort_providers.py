"""ONNX Runtime's execution providers for one instance: the host, CUDA, TensorRT.

``KIND_CPU`` instances run on ``CPUExecutionProvider``. ``KIND_GPU`` instances run on
``CUDAExecutionProvider`` on the instance's GPU (:func:`inferd.core.devices.instance_device`),
after ``TensorrtExecutionProvider`` when the configuration asks for Triton's TensorRT
accelerator::

    optimization { execution_accelerators { gpu_execution_accelerator: [
      { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } } ] } }

Accelerator names are Triton's: ``tensorrt`` and ``cuda`` (the latter's parameters tune the
CUDA provider). Each is checked when the model loads: an unknown name, an unknown parameter
or a provider this ONNX Runtime lacks (``onnxruntime`` from PyPI has neither; install
``onnxruntime-gpu``) refuses the load with a message naming it, also on a machine without GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferd.core.devices import gpu_index, instance_device
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.errors import ConfigError, ModelLoadError

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"

_PROVIDER = {"tensorrt": TENSORRT, "cuda": CUDA}

# Triton's TensorRT accelerator parameters -> the provider's options
_TENSORRT_OPTIONS = {
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "trt_engine_cache_enable": "trt_engine_cache_enable",
    "trt_engine_cache_path": "trt_engine_cache_path",
    "max_partition_iterations": "trt_max_partition_iterations",
    "minimum_segment_size": "trt_min_subgraph_size",
}
_PRECISIONS = {"FP32": None, "FP16": "trt_fp16_enable", "INT8": "trt_int8_enable"}
# the CUDA provider's options that Triton's "cuda" accelerator passes through
_CUDA_OPTIONS = frozenset(
    {
        "cudnn_conv_algo_search",
        "gpu_mem_limit",
        "arena_extend_strategy",
        "do_copy_in_default_stream",
        "cudnn_conv_use_max_workspace",
        "cudnn_conv1d_pad_to_nc1d",
        "enable_cuda_graph",
    }
)


@dataclass(frozen=True)
class Accelerators:
    """The configuration's GPU accelerators as provider options (checked)."""

    tensorrt: dict[str, str] | None = None  # None: not asked for
    cuda: dict[str, str] | None = None


def parse_accelerators(spec: ModelSpec) -> Accelerators:
    """Read ``optimization.execution_accelerators.gpu_execution_accelerator``; ConfigError on
    an unknown accelerator or parameter."""
    optimization = spec.config.get("optimization") or {}
    entries: Sequence[Mapping[str, Any]] = (
        optimization.get("execution_accelerators", {}).get("gpu_execution_accelerator") or []
    )
    tensorrt: dict[str, str] | None = None
    cuda: dict[str, str] | None = None
    for entry in entries:
        name = str(entry.get("name", ""))
        params = {str(k): str(v) for k, v in (entry.get("parameters") or {}).items()}
        if name == "tensorrt":
            tensorrt = _tensorrt_options(spec.name, params)
        elif name == "cuda":
            cuda = _cuda_options(spec.name, params)
        else:
            raise ConfigError(
                f"model '{spec.name}': unknown gpu_execution_accelerator '{name}' (the "
                "onnxruntime backend knows 'tensorrt' and 'cuda')"
            )
    return Accelerators(tensorrt, cuda)


def _tensorrt_options(model: str, params: dict[str, str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for key, value in params.items():
        if key == "precision_mode":
            if value.upper() not in _PRECISIONS:
                raise ConfigError(
                    f"model '{model}': tensorrt precision_mode '{value}' is not one of "
                    f"{', '.join(_PRECISIONS)}"
                )
            option = _PRECISIONS[value.upper()]
            if option is not None:
                options[option] = "True"
        elif key in _TENSORRT_OPTIONS:
            options[_TENSORRT_OPTIONS[key]] = value
        else:
            raise ConfigError(
                f"model '{model}': unknown tensorrt accelerator parameter '{key}' (known: "
                f"precision_mode, {', '.join(sorted(_TENSORRT_OPTIONS))})"
            )
    return options


def _cuda_options(model: str, params: dict[str, str]) -> dict[str, str]:
    unknown = sorted(set(params) - _CUDA_OPTIONS)
    if unknown:
        raise ConfigError(
            f"model '{model}': unknown cuda accelerator parameter '{unknown[0]}' (known: "
            f"{', '.join(sorted(_CUDA_OPTIONS))})"
        )
    return dict(params)


def check_available(spec: ModelSpec, accelerators: Accelerators, available: Sequence[str]) -> None:
    """Refuse a load whose accelerators this ONNX Runtime cannot provide."""
    for name, options in (("tensorrt", accelerators.tensorrt), ("cuda", accelerators.cuda)):
        if options is not None and _PROVIDER[name] not in available:
            raise ModelLoadError(
                f"failed to load '{spec.name}': the {name} execution accelerator is requested "
                f"but this ONNX Runtime has no {_PROVIDER[name]} (it has "
                f"{', '.join(available)}; install onnxruntime-gpu)"
            )


def providers(
    spec: ModelSpec,
    group: InstanceGroupSpec,
    index: int,
    accelerators: Accelerators,
    available: Sequence[str],
) -> list[Any]:
    """The providers (with options) of instance ``index`` of ``group``, best first."""
    gpu = gpu_index(instance_device(group.kind, group.count, group.gpus, index))
    if gpu is None:
        return [CPU]
    if CUDA not in available:
        raise ModelLoadError(
            f"failed to load '{spec.name}': instance group '{group.name}' requests KIND_GPU but "
            "this ONNX Runtime has no CUDA execution provider (install onnxruntime-gpu)"
        )
    check_available(spec, accelerators, available)
    chosen: list[Any] = []
    if accelerators.tensorrt is not None:
        chosen.append((TENSORRT, {"device_id": str(gpu), **accelerators.tensorrt}))
    chosen.append((CUDA, {"device_id": str(gpu), **(accelerators.cuda or {})}))
    chosen.append(CPU)
    return chosen
