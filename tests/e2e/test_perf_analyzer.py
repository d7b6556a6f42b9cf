"""NVIDIA's perf_analyzer against ``inferd serve``: it must run, exit 0 and report throughput.

perf_analyzer is a C++ binary that is not on PyPI for every platform; CI installs it with
``../shared/tools/get-perf-analyzer.sh`` and exports its path as ``$INFERD_PERF_ANALYZER``.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

DEFAULT_LOCATION = Path.home() / ".cache" / "perf_analyzer" / "perf_analyzer"
THROUGHPUT = re.compile(r"Concurrency: (\d+), throughput: ([0-9.]+) infer/sec, latency (\d+) usec")


def _perf_analyzer() -> Path:
    configured = os.environ.get("INFERD_PERF_ANALYZER")
    if configured:
        return Path(configured)
    if DEFAULT_LOCATION.exists():
        return DEFAULT_LOCATION
    pytest.skip(
        "perf_analyzer is not installed; from the repository root run "
        'export INFERD_PERF_ANALYZER="$(bash ../shared/tools/get-perf-analyzer.sh | tail -n 1)" '
        f"and run the tests again (or set INFERD_PERF_ANALYZER to a perf_analyzer binary, or "
        f"place one at {DEFAULT_LOCATION})"
    )


@pytest.fixture(scope="module")
def binary() -> Path:
    return _perf_analyzer()


@pytest.fixture(scope="module")
def server(example_repo: Path, binary: Path) -> Iterator[ServerProcess]:
    with running_server([example_repo]) as proc:
        yield proc


@pytest.mark.parametrize(
    ("protocol", "extra"),
    [
        pytest.param("http", [], id="http-sync"),
        pytest.param("http", ["--async"], id="http-async"),
        pytest.param("grpc", [], id="grpc-sync"),
        pytest.param("grpc", ["--async"], id="grpc-async"),
        pytest.param("grpc", ["--streaming"], id="grpc-streaming"),
    ],
)
def test_perf_analyzer_runs(
    binary: Path, server: ServerProcess, protocol: str, extra: list[str]
) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    cmd = [
        str(binary),
        "-m",
        "simple",
        "-i",
        protocol,
        "-u",
        url,
        "--concurrency-range",
        "1:2",
        "--measurement-interval",
        "500",
        "-p",
        "500",
        # This run checks that the exchange works, not the figures: short windows on a shared
        # machine rarely meet the default 10 % stability bound, so accept any spread.
        "-s",
        "1000",
        "-r",
        "10",
        *extra,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = {int(c): float(t) for c, t, _ in THROUGHPUT.findall(done.stdout)}
    assert sorted(figures) == [1, 2], done.stdout
    assert all(value > 0 for value in figures.values())
    for concurrency, throughput, latency in THROUGHPUT.findall(done.stdout):
        print(
            f"perf_analyzer -i {protocol} {' '.join(extra)}: concurrency {concurrency}, "
            f"{throughput} infer/sec, {latency} usec"
        )
