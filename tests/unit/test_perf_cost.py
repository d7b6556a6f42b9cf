"""What the load cost: /proc readings, the Prometheus CPU counter, RAPL energy counters."""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from inferd.tools.perf.cost import (
    NO_POWER_COUNTERS,
    CostProbe,
    energy_delta_j,
    fetch_cpu_metric,
    parse_cpu_metric,
    parse_proc_stat,
    parse_rss_bytes,
    parse_rss_metric,
    per_thousand,
    proc_cpu_s,
    proc_rss_bytes,
    rapl_zones,
    read_energy_uj,
)


def test_proc_stat_cpu_survives_odd_command_names() -> None:
    line = "1234 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 0 0"
    assert parse_proc_stat(line, 100.0) == pytest.approx(3.0)


def test_this_process_can_be_read_from_proc() -> None:
    cpu = proc_cpu_s(os.getpid())
    rss = proc_rss_bytes(os.getpid())
    assert cpu is not None
    assert cpu > 0
    assert rss is not None
    assert rss > 1_000_000
    assert parse_rss_bytes("Name: x\nVmRSS:\t  2048 kB\n") == 2048 * 1024
    assert parse_rss_bytes("Name: x\n") is None


def test_the_prometheus_cpu_counter_is_found() -> None:
    text = b'# HELP x\nprocess_cpu_seconds_total 12.5\nnv_inference_count{model="m"} 3\n'
    assert parse_cpu_metric(text) == 12.5
    assert parse_cpu_metric(b'process_cpu_seconds_total{job="a"} 1e3\n') == 1000.0
    assert parse_cpu_metric(b"nv_cpu_utilization 0.5\n") is None
    assert parse_rss_metric(b"process_resident_memory_bytes 1.5e+06\n") == 1_500_000
    assert parse_rss_metric(text) is None


def _fake_rapl(root: Path, value: int, max_range: int = 1000) -> None:
    for zone in ("intel-rapl:0", "intel-rapl:0:0"):
        (root / zone).mkdir(parents=True, exist_ok=True)
        (root / zone / "energy_uj").write_text(f"{value}\n")
        (root / zone / "max_energy_range_uj").write_text(f"{max_range}\n")


def test_rapl_packages_are_read_and_wrap_around_is_counted(tmp_path: Path) -> None:
    _fake_rapl(tmp_path, 900)
    zones = rapl_zones(tmp_path)
    assert [z.energy.parent.name for z in zones] == ["intel-rapl:0"]  # sub-zones left out
    before = read_energy_uj(zones)
    _fake_rapl(tmp_path, 100)
    after = read_energy_uj(zones)
    assert before == [900]
    assert after == [100]
    assert energy_delta_j(zones, before, after) == pytest.approx(200 / 1e6)


async def test_a_probe_says_plainly_when_there_are_no_power_counters(tmp_path: Path) -> None:
    probe = CostProbe(server_pid=None, metrics_url=None, in_process=False, powercap=tmp_path)
    await probe.start()
    assert probe.energy_source == NO_POWER_COUNTERS
    assert probe.server_cpu_source == "unknown"
    sample = await probe.sample()
    assert sample.server_cpu_s is None
    assert sample.energy_uj is None
    assert probe.energy_j(sample, sample) is None


async def test_a_probe_reads_a_local_server_and_power_counters(tmp_path: Path) -> None:
    _fake_rapl(tmp_path, 10)
    probe = CostProbe(server_pid=os.getpid(), metrics_url=None, in_process=False, powercap=tmp_path)
    await probe.start()
    assert probe.server_cpu_source == f"/proc/{os.getpid()}/stat"
    assert "intel-rapl:0" in probe.energy_source
    first = await probe.sample()
    _fake_rapl(tmp_path, 40)
    second = await probe.sample()
    assert first.server_cpu_s is not None
    assert second.server_cpu_s is not None
    assert second.server_cpu_s >= first.server_cpu_s
    assert probe.energy_j(first, second) == pytest.approx(30 / 1e6)
    assert per_thousand(2.0, 4000) == 0.5
    assert per_thousand(None, 10) is None
    assert per_thousand(1.0, 0) is None


async def test_an_unreachable_metrics_url_leaves_the_server_cpu_unknown(tmp_path: Path) -> None:
    probe = CostProbe(
        server_pid=None, metrics_url="127.0.0.1:9", in_process=False, powercap=tmp_path
    )
    await probe.start()
    assert probe.server_cpu_source == "unknown"


class _Metrics(BaseHTTPRequestHandler):
    cpu = 1.5

    def do_GET(self) -> None:
        body = (
            f"process_cpu_seconds_total {_Metrics.cpu}\nprocess_resident_memory_bytes 5.24288e+07\n"
        )
        data = body.encode() if self.path == "/metrics" else b""
        self.send_response(200 if data else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


async def test_a_metrics_endpoint_gives_the_server_cpu(tmp_path: Path) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"127.0.0.1:{httpd.server_address[1]}"
        assert fetch_cpu_metric(url) == 1.5
        probe = CostProbe(server_pid=None, metrics_url=url, in_process=False, powercap=tmp_path)
        await probe.start()
        assert probe.server_cpu_source == f"process_cpu_seconds_total at {url}"
        first = await probe.sample()
        _Metrics.cpu = 4.0
        second = await probe.sample()
        assert (first.server_cpu_s, second.server_cpu_s) == (1.5, 4.0)
        assert second.server_rss_bytes == 52_428_800
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
