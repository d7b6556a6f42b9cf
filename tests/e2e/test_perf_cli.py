"""``inferd perf`` as a user runs it: a subprocess against ``inferd serve`` on the example
repository (ports it reports), over each transport and load mode, with short windows; the CSV
and JSON it writes are read back. Also in process, and the baseline gate's exit codes."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
SHORT = ["-p", "250", "-r", "3", "-q"]
PA_COLUMNS = [
    "Concurrency", "Inferences/Second", "Client Send", "Network+Server Send/Recv",
    "Server Queue", "Server Compute Input", "Server Compute Infer", "Server Compute Output",
    "Client Recv", "p50 latency", "p90 latency", "p95 latency", "p99 latency",
]  # fmt: skip


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    args = ["--model-control-mode", "explicit", "--load-model", "simple"]
    args += ["--load-model", "simple_sequence"]
    with running_server([EXAMPLES], args) as proc:
        yield proc


def perf(*argv: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "perf", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == expect, done.stdout + done.stderr
    return done


def _read(tmp_path: Path) -> tuple[list[dict[str, str]], list[str], dict[str, Any]]:
    with (tmp_path / "out.csv").open() as f:
        header = next(csv.reader(f))
    with (tmp_path / "out.csv").open() as f:
        rows = list(csv.DictReader(f))
    return rows, header, json.loads((tmp_path / "out.json").read_text())


def _check(tmp_path: Path, *, first_column: str = "Concurrency", server: bool = True) -> Any:
    rows, header, document = _read(tmp_path)
    assert header == [first_column, *PA_COLUMNS[1:]]
    assert len(rows) == len(document["points"]) >= 1
    for row, point in zip(
        rows, sorted(document["points"], key=lambda p: p["throughput"]), strict=True
    ):
        assert float(row["Inferences/Second"]) > 0
        assert int(row["p50 latency"]) <= int(row["p99 latency"])
        assert point["request_count"] > 0
        assert point["error_count"] == 0
        if server:  # the statistics extension split the server's time
            assert point["server"]["request_count"] > 0
            assert point["server"]["compute_infer_us"] > 0
    return document


@pytest.mark.parametrize(
    ("protocol", "extra", "transport"),
    [
        pytest.param("http", ["--json"], "http-json", id="http-json"),
        pytest.param("http", ["--binary"], "http-binary", id="http-binary"),
        pytest.param("grpc", [], "grpc", id="grpc"),
        pytest.param("grpc", ["--streaming"], "grpc-stream", id="grpc-streaming"),
    ],
)
def test_closed_loop_over_each_transport(
    server: ServerProcess, tmp_path: Path, protocol: str, extra: list[str], transport: str
) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    done = perf(
        "-m", "simple", "-u", url, "-i", protocol, *extra, *SHORT,
        "--concurrency-range", "1:2", "-f", str(tmp_path / "out.csv"),
        "--json-output", str(tmp_path / "out.json"), "--server-pid", str(server.process.pid),
    )  # fmt: skip
    document = _check(tmp_path)
    assert document["settings"]["transport"] == transport
    assert [p["level"] for p in document["points"]] == [1, 2]
    # the server's CPU per 1000 inferences, read from /proc/<pid>/stat
    assert all(p["cost"]["server_cpu_s_per_1000"] > 0 for p in document["points"])
    assert "Concurrency: 2, throughput: " in done.stdout


def test_open_loop_poisson_rate(server: ServerProcess, tmp_path: Path) -> None:
    perf(
        "-m", "simple", "-u", server.grpc_url, "-i", "grpc", *SHORT,
        "--request-rate-range", "200", "--request-distribution", "poisson", "--seed", "5",
        "-f", str(tmp_path / "out.csv"), "--json-output", str(tmp_path / "out.json"),
    )  # fmt: skip
    document = _check(tmp_path, first_column="Request Rate")
    (point,) = document["points"]
    assert point["mode"] == "request-rate"
    assert point["sent"] > 0
    assert document["settings"]["request_distribution"] == "poisson"


def test_sequence_model(server: ServerProcess, tmp_path: Path) -> None:
    perf(
        "-m", "simple_sequence", "-u", server.http_url, *SHORT, "--sequence-length", "5",
        "--concurrency-range", "2", "-f", str(tmp_path / "out.csv"),
        "--json-output", str(tmp_path / "out.json"),
    )  # fmt: skip
    document = _check(tmp_path)
    assert document["settings"]["sequence_model"] is True
    assert document["points"][0]["sequence_count"] > 0


def test_in_process(tmp_path: Path) -> None:
    done = perf(
        "-m", "simple", "-i", "in-process", "--model-repository", str(EXAMPLES), *SHORT,
        "-f", str(tmp_path / "out.csv"), "--json-output", str(tmp_path / "out.json"),
    )  # fmt: skip
    document = _check(tmp_path)
    assert document["settings"]["transport"] == "in-process"
    assert "Concurrency: 1, throughput: " in done.stdout


def test_the_baseline_gate(server: ServerProcess, tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    run = ["-m", "simple", "-u", server.grpc_url, "-i", "grpc", *SHORT]
    perf(*run, "--json-output", str(base))
    document = json.loads(base.read_text())
    measured = document["points"][0]["throughput"]
    # a baseline ten times faster than the server: this run is a drop, named, exit 1
    document["points"][0]["throughput"] = measured * 10
    base.write_text(json.dumps(document))
    done = perf(*run, "--baseline", str(base), "--fail-below", "0.9", expect=1)
    assert "Baseline gate FAILED" in done.stdout
    assert "concurrency 1: " in done.stdout
    # ten times slower: no drop, exit 0
    document["points"][0]["throughput"] = measured / 10
    base.write_text(json.dumps(document))
    done = perf(*run, "--baseline", str(base), "--fail-below", "0.9")
    assert "Baseline gate passed" in done.stdout


@pytest.mark.parametrize(
    ("scenario", "extra", "metric"),
    [
        pytest.param("single-stream", [], "90th percentile latency", id="single-stream"),
        pytest.param(
            "multi-stream",
            ["--samples-per-query", "4"],
            "99th percentile latency",
            id="multi-stream",
        ),
        pytest.param("offline", [], "samples per second", id="offline"),
        pytest.param(
            "server",
            ["--latency-bound-ms", "50", "--target-qps", "200", "--server-runs", "2"],
            "highest target QPS with p99 within the latency bound",
            id="server",
        ),
    ],
)
def test_mlperf_scenarios_through_loadgen(
    server: ServerProcess, tmp_path: Path, scenario: str, extra: list[str], metric: str
) -> None:
    out = tmp_path / "mlperf.json"
    done = perf(
        "-m", "simple", "-u", server.grpc_url, "-i", "grpc", "--scenario", scenario, *extra,
        "--min-duration-ms", "500", "--min-query-count", "100", "--json-output", str(out),
        "--mlperf-log-dir", str(tmp_path / "logs"),
    )  # fmt: skip
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(f"MLPerf {scenario}: {metric}: ")
    assert last.endswith(("— VALID", "— INVALID"))
    result = json.loads(out.read_text())["result"]
    assert result["scenario"] == scenario
    runs = result["runs"]
    assert len(runs) == (2 if scenario == "server" else 1)
    for run in runs:
        assert run["errors"] == 0
        assert run["summary"]["Mode"] == "PerformanceOnly"
    if scenario != "server":
        assert result["value"] > 0
    # LoadGen's own logs are kept where asked
    assert list((tmp_path / "logs").rglob("mlperf_log_summary.txt"))


def test_collect_metrics_reads_the_server_s_gauges(server: ServerProcess, tmp_path: Path) -> None:
    """--collect-metrics reads the host gauges every server exports; with no GPU here the run
    says so, and the GPU columns of --verbose-csv stay empty."""
    out = tmp_path / "out"
    done = perf(
        "-m", "simple", "-u", server.http_url, "--concurrency-range", "2", "-p", "600", "-r", "3",
        "--collect-metrics", "--metrics-url", server.metrics_url, "--metrics-interval", "100",
        "--json-output", f"{out}.json", "-f", f"{out}.csv", "--verbose-csv",
    )  # fmt: skip
    assert "Server Prometheus Metrics" in done.stdout
    assert "Avg CPU Utilization" in done.stdout
    document = json.loads(Path(f"{out}.json").read_text())
    metrics = document["points"][0]["server_metrics"]
    assert metrics["readings"] >= 3
    assert 0.0 <= metrics["cpu_utilization"] <= 1.0
    assert metrics["cpu_memory_used_bytes"] > 0
    assert document["settings"]["metrics_interval_ms"] == 100
    with Path(f"{out}.csv").open() as f:
        rows = list(csv.DictReader(f))
    if not metrics["gpu_utilization"]:
        assert any("reports no GPU" in note for note in document["notes"])
        assert rows[0]["Avg GPU Utilization"] == ""


def test_collect_metrics_without_an_endpoint_is_refused(server: ServerProcess) -> None:
    done = perf(
        "-m", "simple", "-u", server.http_url, "--collect-metrics", "--metrics-url",
        "127.0.0.1:9", *SHORT, expect=2,
    )  # fmt: skip
    assert "nothing answered at http://127.0.0.1:9/metrics" in done.stdout + done.stderr
