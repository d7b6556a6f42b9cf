"""GPU gauges with Triton's names, read through NVML (``nvidia-ml-py``) at scrape time.

``nv_gpu_utilization`` (0.0-1.0), ``nv_gpu_memory_total_bytes``, ``nv_gpu_memory_used_bytes``,
``nv_gpu_power_usage`` (W) and ``nv_gpu_power_limit`` (W), and the counter
``nv_energy_consumption`` (joules since the server started), each labelled ``gpu_uuid="GPU-..."``
as Triton labels them (``perf_analyzer --collect-metrics`` reads exactly this shape). Only the
GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible are reported. Without ``nvidia-ml-py``, an NVIDIA
driver or a GPU the collector reports nothing and raises nothing; a reading NVML refuses (a
GPU without power readings, say) leaves out that one sample.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inferd.core.devices import load_nvml

log = logging.getLogger(__name__)

_GAUGES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes"),
    ("nv_gpu_power_usage", "GPU power usage in watts"),
    ("nv_gpu_power_limit", "GPU power management limit in watts"),
)


def visible_indices(device_count: int, uuids: list[str], cuda_visible: str | None) -> list[int]:
    """The NVML indices CUDA shows the process, in CUDA's order.

    ``CUDA_VISIBLE_DEVICES`` lists indices or (prefixes of) UUIDs; CUDA stops at the first entry
    it cannot match, and so does this."""
    if cuda_visible is None:
        return list(range(device_count))
    chosen: list[int] = []
    for raw in cuda_visible.split(","):
        entry = raw.strip()
        if entry.isdigit() and int(entry) < device_count:
            index: int | None = int(entry)
        else:
            matches = [i for i, u in enumerate(uuids) if entry and u.startswith(entry)]
            index = matches[0] if len(matches) == 1 else None
        if index is None or index in chosen:
            break
        chosen.append(index)
    return chosen


# a sample of a GPU or host gauge in Go's exponent form ("8.5899345920e+010")
_EXPONENT = re.compile(
    rb"^(nv_(?:gpu_\w+|cpu_\w+|energy_consumption)(?:\{[^}]*\})?) (\d\.\d+e\+0*\d+)$", re.M
)


def plain_decimals(text: bytes) -> bytes:
    """The GPU and host gauges as Triton prints them: values as plain decimals, and the energy
    counter's HELP and TYPE lines under its sample name.

    prometheus_client writes values of 10^7 and above in exponent form, which
    ``perf_analyzer --collect-metrics`` (regex ``(\\d+\\.?\\d*)``) would cut at the "e"; memory
    sizes in bytes are whole numbers and are printed as such. It also names a counter family
    ``<name>_total`` in those lines, while Triton's ``nv_energy_consumption`` has no suffix."""
    text = _EXPONENT.sub(lambda m: m[1] + b" " + str(int(float(m[2]))).encode(), text)
    return text.replace(b" nv_energy_consumption_total ", b" nv_energy_consumption ")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuCollector(Collector):
    """The GPU gauges of every visible GPU; nothing where NVML is unavailable."""

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml = nvml if nvml is not None else load_nvml()
        self._handles: list[tuple[str, Any]] = []
        if self._nvml is None:
            return
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
            handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            uuids = [_text(self._nvml.nvmlDeviceGetUUID(h)) for h in handles]
        except Exception as exc:  # NVML's own error classes
            log.warning("GPU metrics are off: NVML could not list the GPUs: %s", exc)
            return
        for index in visible_indices(count, uuids, os.environ.get("CUDA_VISIBLE_DEVICES")):
            self._handles.append((uuids[index], handles[index]))
        # the energy counter counts from the server's start, as Triton's does
        self._energy_start: dict[str, float] = {}
        for uuid, handle in self._handles:
            with contextlib.suppress(Exception):  # GPUs before Volta have no energy counter
                self._energy_start[uuid] = self._energy_mj(handle)

    def _energy_mj(self, handle: Any) -> float:
        nvml: Any = self._nvml
        return float(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))  # millijoules

    @property
    def gpu_uuids(self) -> list[str]:
        return [uuid for uuid, _ in self._handles]

    def _readings(self, handle: Any) -> list[Callable[[], float]]:
        nvml: Any = self._nvml
        return [
            lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0,
            lambda: float(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            lambda: float(nvml.nvmlDeviceGetMemoryInfo(handle).used),
            lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,  # milliwatts
            lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0,
        ]

    def collect(self) -> Iterator[Metric]:
        if not self._handles:
            return
        families = [GaugeMetricFamily(n, h, labels=["gpu_uuid"]) for n, h in _GAUGES]
        # a counter sampled under its own name, no "_total", as Triton exposes it
        energy = Metric(
            "nv_energy_consumption",
            "GPU energy consumption in joules since the server started",
            "counter",
        )
        for uuid, handle in self._handles:
            for family, read in zip(families, self._readings(handle), strict=True):
                with contextlib.suppress(Exception):  # a reading NVML refuses is left out
                    family.add_metric([uuid], read())
            if uuid in self._energy_start:
                with contextlib.suppress(Exception):
                    joules = (self._energy_mj(handle) - self._energy_start[uuid]) / 1000.0
                    energy.add_sample("nv_energy_consumption", {"gpu_uuid": uuid}, joules)
        yield from (f for f in families if f.samples)
        if energy.samples:
            yield energy

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None
            self._handles = []
