"""``--collect-metrics``: the server's GPU and host gauges, read while the load runs.

A :class:`MetricsSampler` reads the server's Prometheus endpoint every ``--metrics-interval``
milliseconds on a worker thread (the event loop that drives the load never waits on it) and
keeps each reading with the time it was taken. A load point's figures come from the readings
taken during its reported windows, aggregated per GPU as ``perf_analyzer`` does:

- GPU utilization and power: the mean of the readings;
- GPU memory used: the largest reading; total memory: the first one;
- GPU energy: the growth of ``nv_energy_consumption`` (joules) across the readings, scaled to
  the windows' duration; without that counter, the mean power times the duration;
- ``nv_cpu_utilization`` (inferd and Triton export it): the mean, and host memory used: the
  largest reading.

A server that exports no GPU gauges (no GPU, or a server without them) gives only the host
figures; one that answers nothing gives none, and the run says so.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MetricsReading",
    "MetricsSampler",
    "ServerMetrics",
    "aggregate",
    "metrics_url_for",
    "parse_reading",
]

# one sample line: name, optional labels, value (timestamps are not written by these servers)
_SAMPLE = re.compile(rb"^(nv_[a-z_]+)(\{[^}]*\})?\s+(\S+)", re.M)
_UUID = re.compile(rb'gpu_uuid="([^"]*)"')
_GPU_NAMES = {
    b"nv_gpu_utilization": "utilization",
    b"nv_gpu_power_usage": "power_w",
    b"nv_gpu_memory_used_bytes": "memory_used",
    b"nv_gpu_memory_total_bytes": "memory_total",
    b"nv_energy_consumption": "energy_j",
}
_HOST_NAMES = {
    b"nv_cpu_utilization": "cpu_utilization",
    b"nv_cpu_memory_used_bytes": "cpu_memory_used",
}


@dataclass(frozen=True, slots=True)
class MetricsReading:
    """One scrape: per GPU (by UUID) the gauges it reported, and the host gauges."""

    at_ns: int
    gpus: dict[str, dict[str, float]] = field(default_factory=dict)
    host: dict[str, float] = field(default_factory=dict)


def parse_reading(text: bytes, at_ns: int) -> MetricsReading:
    """The GPU and host gauges of a Prometheus text exposition (other families ignored)."""
    gpus: dict[str, dict[str, float]] = {}
    host: dict[str, float] = {}
    for match in _SAMPLE.finditer(text):
        name, labels, raw = match.group(1), match.group(2) or b"", match.group(3)
        try:
            value = float(raw)
        except ValueError:
            continue
        if name in _GPU_NAMES:
            uuid = _UUID.search(labels)
            if uuid is not None:
                gpus.setdefault(uuid.group(1).decode(), {})[_GPU_NAMES[name]] = value
        elif name in _HOST_NAMES:
            host[_HOST_NAMES[name]] = value
    return MetricsReading(at_ns, gpus, host)


def metrics_url_for(url: str) -> str:
    """``http://host:port/metrics`` for a ``host:port[/path]`` (``/metrics`` when no path)."""
    full = url if "://" in url else f"http://{url}"
    scheme, _, rest = full.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host}/{path if slash and path else 'metrics'}"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


@dataclass(frozen=True, slots=True)
class ServerMetrics:
    """A load point's server-side gauges (per GPU UUID), aggregated over its windows."""

    readings: int
    gpu_utilization: dict[str, float] = field(default_factory=dict)  # 0..1, mean
    gpu_power_w: dict[str, float] = field(default_factory=dict)  # mean
    gpu_memory_used_bytes: dict[str, float] = field(default_factory=dict)  # max
    gpu_memory_total_bytes: dict[str, float] = field(default_factory=dict)  # first
    gpu_energy_j: float | None = None  # every GPU together, over the point's duration
    cpu_utilization: float | None = None  # 0..1, mean
    cpu_memory_used_bytes: float | None = None  # max

    def as_dict(self) -> dict[str, Any]:
        return {
            "readings": self.readings,
            "gpu_utilization": self.gpu_utilization,
            "gpu_power_w": self.gpu_power_w,
            "gpu_memory_used_bytes": self.gpu_memory_used_bytes,
            "gpu_memory_total_bytes": self.gpu_memory_total_bytes,
            "gpu_energy_j": self.gpu_energy_j,
            "cpu_utilization": self.cpu_utilization,
            "cpu_memory_used_bytes": self.cpu_memory_used_bytes,
        }


def _gpu_energy(readings: Sequence[MetricsReading], duration_s: float) -> float | None:
    """Joules every GPU used over ``duration_s``: the energy counter's growth per second across
    the readings, else the mean power; None without either."""
    uuids = {u for r in readings for u in r.gpus}
    if not uuids or duration_s <= 0:
        return None
    total = 0.0
    for uuid in sorted(uuids):
        counted = [
            (r.at_ns, r.gpus[uuid]["energy_j"])
            for r in readings
            if "energy_j" in r.gpus.get(uuid, {})
        ]
        if len(counted) >= 2 and counted[-1][0] > counted[0][0]:
            (t0, e0), (t1, e1) = counted[0], counted[-1]
            total += max(0.0, e1 - e0) / ((t1 - t0) / 1e9) * duration_s
            continue
        power = [r.gpus[uuid]["power_w"] for r in readings if "power_w" in r.gpus.get(uuid, {})]
        if not power:
            return None
        total += _mean(power) * duration_s
    return total


def _per_gpu(
    readings: Sequence[MetricsReading], key: str, pick: Callable[[list[float]], float]
) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for reading in readings:
        for uuid, gauges in reading.gpus.items():
            if key in gauges:
                values.setdefault(uuid, []).append(gauges[key])
    return {uuid: pick(v) for uuid, v in sorted(values.items())}


def aggregate(readings: Sequence[MetricsReading], duration_s: float) -> ServerMetrics | None:
    """The figures of the readings taken during a load point's reported windows (None: no
    reading was taken)."""
    if not readings:
        return None
    cpu = [r.host["cpu_utilization"] for r in readings if "cpu_utilization" in r.host]
    memory = [r.host["cpu_memory_used"] for r in readings if "cpu_memory_used" in r.host]
    return ServerMetrics(
        readings=len(readings),
        gpu_utilization=_per_gpu(readings, "utilization", _mean),
        gpu_power_w=_per_gpu(readings, "power_w", _mean),
        gpu_memory_used_bytes=_per_gpu(readings, "memory_used", max),
        gpu_memory_total_bytes=_per_gpu(readings, "memory_total", lambda v: v[0]),
        gpu_energy_j=_gpu_energy(readings, duration_s),
        cpu_utilization=_mean(cpu) if cpu else None,
        cpu_memory_used_bytes=max(memory) if memory else None,
    )


def _fetch(url: str, timeout_s: float) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            body: bytes = answer.read()
            return body
    except (OSError, ValueError):
        return None


class MetricsSampler:
    """Reads ``url`` every ``interval_ms`` on a thread of its own while started; readings are
    stamped with ``clock`` (the load driver's), so a window takes the ones inside its edges."""

    def __init__(
        self,
        url: str,
        interval_ms: float,
        *,
        clock: Callable[[], int] = time.perf_counter_ns,
        fetch: Callable[[str, float], bytes | None] = _fetch,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError("the metrics interval must be above 0 ms")
        self.url = metrics_url_for(url)
        self._interval_s = interval_ms / 1000
        self._clock = clock
        self._fetch = fetch
        self._readings: list[MetricsReading] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0

    async def check(self) -> bool:
        """Whether the endpoint answers now (before the load starts)."""
        text = await asyncio.to_thread(self._fetch, self.url, 2.0)
        return text is not None

    def read_once(self) -> None:
        text = self._fetch(self.url, max(1.0, 2 * self._interval_s))
        if text is None:
            self.failures += 1
            return
        reading = parse_reading(text, self._clock())
        with self._lock:
            self._readings.append(reading)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.read_once()
            self._stop.wait(max(0.0, self._interval_s - (time.monotonic() - started)))

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="perf-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()

    def between(self, start_ns: int, end_ns: int) -> tuple[MetricsReading, ...]:
        """The readings taken in ``[start_ns, end_ns)``."""
        with self._lock:
            return tuple(r for r in self._readings if start_ns <= r.at_ns < end_ns)

    def clear(self) -> None:
        with self._lock:
            self._readings.clear()
