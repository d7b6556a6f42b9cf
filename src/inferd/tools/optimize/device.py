"""Where ``inferd optimize`` measures: the host or a CUDA GPU, chosen by ``--device``.

``--device auto`` (the default) measures where the model's configuration serves it: on a GPU when
an instance group asks for ``KIND_GPU`` (the first GPU it lists, else GPU 0), on the host
otherwise (``KIND_CPU``, ``KIND_MODEL``, ``KIND_AUTO`` or no instance group: what ``KIND_AUTO``
picks depends on the machine that serves, so optimize does not guess). ``--device cuda[:N]``
asks for GPU ``N`` whatever the configuration says, ``--device cpu`` for the host.

A GPU that is asked for and cannot be used is refused before anything is built, naming what is
missing (torch without CUDA, ONNX Runtime without its CUDA execution provider, no visible GPU);
optimize never falls back to the host silently. Every model the run serves (the baseline and
each candidate) gets one instance group on the chosen device, so all are measured in the same
place; what is written into the repository keeps the model's own instance groups.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from inferd.codecs.model_config import ModelConfig
from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.candidate import ONNX_PLATFORM, OPENVINO_PLATFORM

__all__ = [
    "DEVICE_CHOICES",
    "Device",
    "cuda_problem",
    "device_config",
    "moves_instances",
    "parse_device",
    "require_device",
    "resolve_device",
]

DEVICE_CHOICES = "cpu, cuda, cuda:N or auto"
_CUDA = re.compile(r"^cuda(?::(\d+))?$")
_TORCH_PLATFORMS = ("pytorch_libtorch", "torch_export")


@dataclass(frozen=True)
class Device:
    """``cpu``, or GPU ``index`` (``cuda:N``); ``why`` says how it was chosen."""

    index: int | None = None  # None: the host
    why: str = "asked for with --device"

    @property
    def is_cuda(self) -> bool:
        return self.index is not None

    @property
    def name(self) -> str:
        return "cpu" if self.index is None else f"cuda:{self.index}"


def parse_device(text: str) -> str:
    """``text`` checked: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``."""
    value = text.strip().lower()
    if value in ("cpu", "auto") or _CUDA.match(value):
        return value
    raise InvalidArgumentError(f"--device {text!r}: give {DEVICE_CHOICES}")


def resolve_device(requested: str, config: ModelConfig) -> Device:
    """The device ``requested`` (see :func:`parse_device`) means for a model with ``config``."""
    value = parse_device(requested)
    if value == "cpu":
        return Device(None)
    match = _CUDA.match(value)
    if match is not None:
        return Device(int(match.group(1) or 0))
    for group in config.instance_group:
        if _kind(group) == "KIND_GPU":
            gpu = group.gpus[0] if group.gpus else 0
            return Device(gpu, "the model's instance group asks for KIND_GPU")
    return Device(None, "the model's configuration does not ask for KIND_GPU")


def _kind(group: Any) -> str:
    """An instance group's kind by name (``KIND_GPU``...)."""
    return str(type(group).Kind.Name(group.kind))


def _torch_cuda(index: int) -> str | None:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (a CUDA build of torch serves PyTorch models on a GPU)"
    if not torch.cuda.is_available():
        return (
            f"torch {torch.__version__} sees no CUDA device (a CPU-only torch build, no driver, "
            "or CUDA_VISIBLE_DEVICES hides the GPUs)"
        )
    count = torch.cuda.device_count()
    if index >= count:
        return f"torch sees {count} CUDA device(s), numbered 0 to {count - 1}, not GPU {index}"
    return None


def _ort_cuda(index: int) -> str | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return "ONNX Runtime is not installed (install onnxruntime-gpu)"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return (
            f"this ONNX Runtime ({ort.__version__}) has no CUDA execution provider "
            "(install onnxruntime-gpu)"
        )
    from inferd.core.devices import visible_gpu_count

    count = visible_gpu_count()
    if index >= count:
        return (
            f"NVML finds {count} visible GPU(s), not GPU {index} (no driver, or "
            "CUDA_VISIBLE_DEVICES hides it)"
        )
    return None


def cuda_problem(platform: str, index: int) -> str | None:
    """Why a ``platform`` model cannot be measured on GPU ``index`` here; None when it can."""
    if platform in _TORCH_PLATFORMS:
        return _torch_cuda(index)
    if platform == ONNX_PLATFORM:
        return _ort_cuda(index)
    if platform == OPENVINO_PLATFORM:
        return "the openvino backend computes on the host"
    return f"optimize measures ONNX and PyTorch models on a GPU, not {platform or 'this model'}"


def require_device(device: Device, platform: str, model: str) -> None:
    """Refuse a GPU that cannot be used, naming the reason (never a silent fallback)."""
    if device.index is None:
        return
    problem = cuda_problem(platform, device.index)
    if problem is not None:
        raise InvalidArgumentError(
            f"cannot measure '{model}' on {device.name} ({device.why}): {problem}; "
            "use --device cpu to measure on the host"
        )


def device_config(config: ModelConfig, device: Device) -> ModelConfig:
    """``config`` with its instances on ``device``.

    On a GPU: one ``KIND_GPU`` group on that GPU with as many instances as the configuration's
    largest group (at least one). On the host: ``KIND_GPU`` and ``KIND_AUTO`` groups become
    ``KIND_CPU`` (a GPU group keeps one instance per GPU it listed); a configuration without
    groups is left to the server's default unless this machine has a GPU, where ``KIND_AUTO``
    would pick it, and then gets one ``KIND_CPU`` instance."""
    groups = list(config.instance_group)
    result = ModelConfig()
    result.CopyFrom(config)
    if device.index is not None:
        if groups and all(
            _kind(g) == "KIND_GPU" and list(g.gpus) == [device.index] for g in groups
        ):
            return result  # already there
        count = max([1, *(g.count for g in groups)])
        result.ClearField("instance_group")
        group = result.instance_group.add()
        group.name = config.name or "optimize"
        group.count = count
        group.kind = group.KIND_GPU
        group.gpus.append(device.index)
        return result
    if not groups:
        from inferd.core.devices import visible_gpu_count

        if visible_gpu_count() > 0:
            group = result.instance_group.add()
            group.name = config.name or "optimize"
            group.count = 1
            group.kind = group.KIND_CPU
        return result
    for group in result.instance_group:
        if _kind(group) in ("KIND_GPU", "KIND_AUTO"):
            group.count = max(1, group.count) * max(1, len(group.gpus))
            group.ClearField("gpus")
            group.kind = group.KIND_CPU
    return result


def moves_instances(config: ModelConfig, device: Device) -> bool:
    """Whether :func:`device_config` changes where ``config``'s instances run."""
    return _placements(device_config(config, device)) != _placements(config)


def _placements(config: ModelConfig) -> list[tuple[str, int, list[int]]]:
    return [(_kind(g), g.count, list(g.gpus)) for g in config.instance_group]
