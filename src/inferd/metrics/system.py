"""Host CPU and memory gauges with Triton's names, read from /proc at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


def _cpu_times() -> tuple[int, int] | None:
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values), idle


def _memory() -> tuple[int, int] | None:
    info: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            info[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    total = info.get("MemTotal", 0)
    return total, total - info.get("MemAvailable", info.get("MemFree", 0))


class SystemCollector(Collector):
    """``nv_cpu_utilization`` (0..1 since the previous scrape) and host memory."""

    def __init__(self) -> None:
        self._last = _cpu_times()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = _cpu_times()
        utilization = 0.0
        if now is not None and self._last is not None:
            total = now[0] - self._last[0]
            idle = now[1] - self._last[1]
            utilization = (total - idle) / total if total > 0 else 0.0
        self._last = now
        yield GaugeMetricFamily(
            "nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", value=utilization
        )
        memory = _memory()
        if memory is not None:
            yield GaugeMetricFamily(
                "nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", value=memory[0]
            )
            yield GaugeMetricFamily(
                "nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", value=memory[1]
            )
