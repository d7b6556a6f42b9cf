"""NVIDIA's perf_analyzer against ``inferd serve``: it must run, exit 0 and report throughput.

perf_analyzer is a C++ binary that is not on PyPI for every platform; the project's
``scripts/get-perf-analyzer.sh`` installs it (CI too) and prints its path, which the tests read
from ``$INFERD_PERF_ANALYZER``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

DEFAULT_LOCATION = Path.home() / ".cache" / "perf_analyzer" / "perf_analyzer"
INSTALL_SCRIPT = "scripts/get-perf-analyzer.sh"  # in the repository, beside src/ and tests/
INSTALL_COMMAND = f'export INFERD_PERF_ANALYZER="$(bash {INSTALL_SCRIPT} | tail -n 1)"'
THROUGHPUT = re.compile(r"Concurrency: (\d+), throughput: ([0-9.]+) infer/sec, latency (\d+) usec")


def _perf_analyzer() -> Path:
    configured = os.environ.get("INFERD_PERF_ANALYZER")
    if configured:
        return Path(configured)
    if DEFAULT_LOCATION.exists():
        return DEFAULT_LOCATION
    pytest.skip(
        "perf_analyzer is not installed; from the repository root run "
        f"{INSTALL_COMMAND} "
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
    _run_and_check(binary, server, protocol, extra)


@pytest.fixture(scope="module")
def shm_server(example_repo: Path, binary: Path) -> Iterator[ServerProcess]:
    with running_server([example_repo], ["--allow-shared-memory=true"]) as proc:
        yield proc


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_through_system_shared_memory(
    binary: Path, shm_server: ServerProcess, protocol: str
) -> None:
    # perf_analyzer registers a region per input and output, reads outputs from them, and
    # unregisters them all at the end
    _run_and_check(binary, shm_server, protocol, ["--shared-memory", "system"])
    client = httpclient.InferenceServerClient(shm_server.http_url)
    try:
        assert client.get_system_shared_memory_status() == []
    finally:
        client.close()


def _run_and_check(binary: Path, server: ServerProcess, protocol: str, extra: list[str]) -> None:
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


def test_the_skip_message_names_an_install_script_of_the_repository(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A clone has what the message says to run: no path outside the repository."""
    monkeypatch.delenv("INFERD_PERF_ANALYZER", raising=False)
    monkeypatch.setattr(sys.modules[__name__], "DEFAULT_LOCATION", tmp_path / "none")
    with pytest.raises(pytest.skip.Exception) as skipped:
        _perf_analyzer()
    named = re.search(r"bash (\S+) \| tail -n 1", str(skipped.value))
    assert named is not None, str(skipped.value)
    root = Path(__file__).resolve().parents[2]
    script = (root / named.group(1)).resolve()
    assert script.is_relative_to(root), script
    assert script.is_file()
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    text = script.read_text()
    assert "tritonclient==$TRITONCLIENT_VERSION" in text  # where the binary comes from
    assert text.rstrip().endswith('echo "$target/perf_analyzer"')  # the path, printed last
