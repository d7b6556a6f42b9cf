"""Where a model's instances run: the device of each instance of an instance group, and how
many GPUs this process may use.

Triton's rule: an instance group of ``kind: KIND_GPU`` with ``count: n`` and ``gpus: [a, b]``
places ``n`` instances on *each* listed GPU (``2 n`` in all: ``n`` on ``a`` first, then ``n`` on
``b``); ``KIND_CPU`` and ``KIND_MODEL`` groups place ``count`` instances on the host. The
runtimes ask :func:`instance_device` which device an instance index gets; the loader asks
:func:`instance_count` how many instances a group makes.

:func:`visible_gpu_count` reads NVML (``nvidia-ml-py``, imported only here and only when first
asked) and honours ``CUDA_VISIBLE_DEVICES`` as CUDA does; without NVML, a driver or a GPU it is
0, and ``KIND_GPU`` groups are refused at load with a message that says so.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from typing import Any

CPU = "cpu"


def instance_count(kind: str, count: int, gpus: tuple[int, ...]) -> int:
    """How many instances a group makes: ``count`` per listed GPU for ``KIND_GPU``."""
    per = max(1, count)
    if kind == "KIND_GPU" and gpus:
        return per * len(gpus)
    return per


def instance_device(kind: str, count: int, gpus: tuple[int, ...], index: int) -> str:
    """The device of instance ``index`` of a group: ``"cpu"`` or ``"cuda:<gpu>"``.

    ``KIND_GPU`` without GPUs listed means GPU 0 (normalisation lists every visible GPU before
    a model loads, so that case is only met by a spec built by hand)."""
    if kind != "KIND_GPU":
        return CPU
    if index < 0 or index >= instance_count(kind, count, gpus):
        raise ValueError(
            f"instance {index} is outside its group ({instance_count(kind, count, gpus)} "
            "instance(s))"
        )
    if not gpus:
        return "cuda:0"
    return f"cuda:{gpus[index // max(1, count)]}"


def group_devices(kind: str, count: int, gpus: tuple[int, ...]) -> list[str]:
    """Every instance's device, in instance order."""
    return [instance_device(kind, count, gpus, i) for i in range(instance_count(kind, count, gpus))]


def gpu_index(device: str) -> int | None:
    """The GPU number of ``"cuda:<n>"``; None for the host."""
    if device == CPU:
        return None
    kind, _, number = device.partition(":")
    if kind != "cuda" or not number.isdigit():
        raise ValueError(f"not a device name: {device!r} (expected 'cpu' or 'cuda:<n>')")
    return int(number)


def _visible_limit(value: str | None) -> int | None:
    """How many devices ``CUDA_VISIBLE_DEVICES`` leaves visible (None when unset).

    CUDA stops at the first entry it cannot use (an empty string, ``-1``, ``NoDevFiles``...)."""
    if value is None:
        return None
    visible = 0
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-") or entry.lower() == "nodevfiles":
            break
        visible += 1
    return visible


def count_visible(physical: int, cuda_visible_devices: str | None) -> int:
    """The GPUs CUDA shows a process: the physical ones, capped by ``CUDA_VISIBLE_DEVICES``."""
    limit = _visible_limit(cuda_visible_devices)
    return physical if limit is None else min(physical, limit)


def load_nvml() -> Any | None:
    """The ``pynvml`` module of ``nvidia-ml-py``, initialised; None when it or NVML is absent.

    Each successful call must be paired with ``nvmlShutdown`` (NVML counts its inits)."""
    try:
        pynvml = importlib.import_module("pynvml")
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no library, no GPU: NVML raises its own error classes
        return None
    return pynvml


def _nvml_device_count() -> int:
    pynvml = load_nvml()
    if pynvml is None:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


@functools.cache
def visible_gpu_count() -> int:
    """The GPUs this process may use (read once): 0 without NVML, a driver or a GPU."""
    return count_visible(_nvml_device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def runtime_has_cuda(backend: str) -> bool:
    """Whether the runtime behind ``backend`` can compute on a CUDA GPU in this process:
    ``pytorch`` with a CUDA build of torch that sees a device, ``onnxruntime`` with the CUDA
    execution provider (``onnxruntime-gpu``). Every other backend of inferd runs on the host.

    Imports the runtime; call it only when :func:`visible_gpu_count` is above 0."""
    try:
        if backend == "pytorch":
            torch = importlib.import_module("torch")
            return bool(torch.cuda.is_available())
        if backend == "onnxruntime":
            ort = importlib.import_module("onnxruntime")
            return "CUDAExecutionProvider" in ort.get_available_providers()
    except ImportError:
        return False
    return False
