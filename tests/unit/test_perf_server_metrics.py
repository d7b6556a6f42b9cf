"""``inferd perf --collect-metrics``: reading the server's GPU and host gauges and aggregating
them per load point as perf_analyzer does (mean utilization and power, peak memory, first
total), the energy from Triton's ``nv_energy_consumption`` counter, and the GPU collector's
counter in the exposition shape the reader parses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from inferd.metrics.gpu import GpuCollector, plain_decimals
from inferd.tools.perf.report import csv_text, metrics_lines
from inferd.tools.perf.server_metrics import (
    MetricsReading,
    MetricsSampler,
    aggregate,
    metrics_url_for,
    parse_reading,
)
from inferd.tools.perf.summary import Window, merge


class _Gauges(Collector):
    """GPU and host gauges with fixed values, exposed by the real prometheus_client."""

    def __init__(self, values: dict[str, dict[str, float]], cpu: float) -> None:
        self.values = values
        self.cpu = cpu

    def collect(self) -> Any:
        for name, per_gpu in self.values.items():
            family = GaugeMetricFamily(name, name, labels=["gpu_uuid"])
            for uuid, value in per_gpu.items():
                family.add_metric([uuid], value)
            yield family
        yield GaugeMetricFamily("nv_cpu_utilization", "cpu", value=self.cpu)
        yield GaugeMetricFamily("nv_cpu_memory_used_bytes", "mem", value=2.5e10)


def _exposition(values: dict[str, dict[str, float]], cpu: float = 0.5) -> bytes:
    registry = CollectorRegistry()
    registry.register(_Gauges(values, cpu))
    return plain_decimals(generate_latest(registry))


def _reading(at_s: float, util: float, power: float, used: float, energy: float) -> MetricsReading:
    text = _exposition(
        {
            "nv_gpu_utilization": {"GPU-a": util, "GPU-b": util / 2},
            "nv_gpu_power_usage": {"GPU-a": power, "GPU-b": power / 2},
            "nv_gpu_memory_used_bytes": {"GPU-a": used, "GPU-b": used / 2},
            "nv_gpu_memory_total_bytes": {"GPU-a": 8.5e10, "GPU-b": 8.5e10},
            "nv_energy_consumption": {"GPU-a": energy, "GPU-b": energy / 2},
        },
        cpu=util,
    )
    return parse_reading(text, int(at_s * 1e9))


def test_a_reading_keeps_each_gpu_apart_and_the_host_gauges() -> None:
    r = _reading(1.0, 0.8, 300.0, 4e10, 1000.0)
    assert set(r.gpus) == {"GPU-a", "GPU-b"}
    assert r.gpus["GPU-a"] == {
        "utilization": 0.8,
        "power_w": 300.0,
        "memory_used": 4e10,
        "memory_total": 8.5e10,
        "energy_j": 1000.0,
    }
    assert r.gpus["GPU-b"]["power_w"] == 150.0
    assert r.host == {"cpu_utilization": 0.8, "cpu_memory_used": 2.5e10}
    assert parse_reading(b"process_cpu_seconds_total 3.5\n", 0).gpus == {}


def test_aggregation_follows_perf_analyzer() -> None:
    readings = [
        _reading(1.0, 0.2, 100.0, 1e9, 1000.0),
        _reading(2.0, 0.6, 300.0, 3e9, 1200.0),
        _reading(3.0, 0.4, 200.0, 2e9, 1400.0),
    ]
    m = aggregate(readings, duration_s=4.0)
    assert m is not None
    assert m.readings == 3
    assert m.gpu_utilization == pytest.approx({"GPU-a": 0.4, "GPU-b": 0.2})
    assert m.gpu_power_w == pytest.approx({"GPU-a": 200.0, "GPU-b": 100.0})
    assert m.gpu_memory_used_bytes == {"GPU-a": 3e9, "GPU-b": 1.5e9}
    assert m.gpu_memory_total_bytes == {"GPU-a": 8.5e10, "GPU-b": 8.5e10}
    # GPU-a: 400 J over 2 s = 200 W; GPU-b 100 W; over the 4 s the point lasted
    assert m.gpu_energy_j == pytest.approx((200.0 + 100.0) * 4.0)
    assert m.cpu_utilization == pytest.approx(0.4)
    assert aggregate([], 1.0) is None


def test_energy_falls_back_to_the_mean_power_without_the_counter() -> None:
    text = _exposition({"nv_gpu_power_usage": {"GPU-a": 250.0}})
    m = aggregate([parse_reading(text, 1), parse_reading(text, 2)], duration_s=2.0)
    assert m is not None
    assert m.gpu_energy_j == pytest.approx(500.0)
    host_only = aggregate([parse_reading(_exposition({}), 1)], duration_s=2.0)
    assert host_only is not None
    assert host_only.gpu_energy_j is None
    assert host_only.gpu_utilization == {}
    assert host_only.cpu_utilization == 0.5


def test_a_point_takes_the_readings_of_its_windows() -> None:
    readings = (_reading(1.0, 0.5, 100.0, 1e9, 10.0), _reading(2.0, 0.5, 100.0, 1e9, 110.0))
    window = Window(
        duration_ns=2_000_000_000,
        latencies_ns=np.full(100, 1_000_000, dtype=np.int64),
        metrics=readings,
    )
    point = merge([window], mode="concurrency", level=1, batch_size=1, stable=True, percentile=None)
    assert point.server_metrics is not None
    assert point.cost["gpu_energy_j"] == pytest.approx(300.0)  # (100 + 50) W x 2 s
    assert point.cost["gpu_energy_j_per_1000"] == pytest.approx(3000.0)
    header, row = csv_text([point], verbose=True).splitlines()
    columns = header.split(",")
    assert columns[-4:] == [
        "Avg GPU Utilization",
        "Avg GPU Power Usage",
        "Max GPU Memory Usage",
        "Total GPU Memory",
    ]
    assert row.endswith(",GPU-a:1e+09;GPU-b:5e+08;,GPU-a:8.5e+10;GPU-b:8.5e+10;")
    assert "GPU-a:0.5;GPU-b:0.25;" in row
    assert "    Avg GPU Power Usage:" in metrics_lines(point.server_metrics)
    bare = merge(
        [Window(duration_ns=10**9, latencies_ns=np.ones(3, dtype=np.int64))],
        mode="concurrency", level=1, batch_size=1, stable=True, percentile=None,
    )  # fmt: skip
    assert bare.server_metrics is None
    assert "GPU" not in csv_text([bare], verbose=True)


def test_the_sampler_reads_on_its_thread_and_windows_pick_by_time() -> None:
    clock = iter(range(10, 10_000, 10))
    served: list[str] = []

    def fetch(url: str, timeout_s: float) -> bytes | None:
        served.append(url)
        return None if len(served) == 2 else _exposition({"nv_gpu_utilization": {"GPU-a": 0.5}})

    sampler = MetricsSampler("host:9", 5, clock=lambda: next(clock), fetch=fetch)
    assert sampler.url == "http://host:9/metrics"
    for _ in range(4):
        sampler.read_once()
    assert sampler.failures == 1
    assert [r.at_ns for r in sampler.between(0, 10_000)] == [10, 20, 30]
    assert [r.at_ns for r in sampler.between(15, 30)] == [20]
    sampler.clear()
    assert sampler.between(0, 10_000) == ()
    with pytest.raises(ValueError, match="above 0"):
        MetricsSampler("h:1", 0)


def test_metrics_urls() -> None:
    assert metrics_url_for("localhost:8002") == "http://localhost:8002/metrics"
    assert metrics_url_for("localhost:8002/metrics") == "http://localhost:8002/metrics"
    assert metrics_url_for("https://m.example:9/x/metrics") == "https://m.example:9/x/metrics"
    assert metrics_url_for("[::1]:8002/") == "http://[::1]:8002/metrics"


class _Nvml:
    """NVML's calls the collector makes, for one GPU (no GPU here to read)."""

    def __init__(self) -> None:
        self.energy_mj = 5_000_000.0

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return "h0"

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return "GPU-1234"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> float:
        return self.energy_mj

    def nvmlDeviceGetPowerUsage(self, handle: str) -> float:
        return 123_000.0

    def nvmlShutdown(self) -> None:
        pass


def test_the_energy_counter_counts_from_start_under_triton_s_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = _Nvml()
    collector = GpuCollector(nvml)
    nvml.energy_mj += 2_500_000.0  # 2500 J later
    registry = CollectorRegistry()
    registry.register(collector)
    text = plain_decimals(generate_latest(registry))
    assert b"# TYPE nv_energy_consumption counter" in text
    assert b'nv_energy_consumption{gpu_uuid="GPU-1234"} 2500.0' in text
    assert b"nv_energy_consumption_total" not in text
    reading = parse_reading(text, 1)
    assert reading.gpus["GPU-1234"]["energy_j"] == 2500.0
    assert reading.gpus["GPU-1234"]["power_w"] == 123.0
