"""The ``inferd serve`` command line: help, ready file, and loud refusal of bad flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from inferd.testing import running_server

pytestmark = pytest.mark.e2e

SERVE = [sys.executable, "-m", "inferd.cli.main", "serve"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVE, *args], capture_output=True, text=True, timeout=60, check=False)


def test_help_mentions_the_main_flags() -> None:
    done = _run("--help")
    assert done.returncode == 0
    for flag in (
        "--model-repository",
        "--model-control-mode",
        "--load-model",
        "--repository-poll-secs",
        "--strict-readiness",
        "--exit-on-error",
        "--exit-timeout-secs",
        "--http-port",
        "--grpc-port",
        "--metrics-port",
        "--http-max-input-size",
        "--ready-file",
    ):
        assert flag in done.stdout, flag


def test_ready_file_holds_the_bound_ports(example_repo: Path, tmp_path: Path) -> None:
    ready = tmp_path / "ports.json"
    with running_server([example_repo], ["--ready-file", str(ready)]) as server:
        written = json.loads(ready.read_text())
        assert written == {"pid": server.process.pid, **server.ports}
        assert set(server.ports) == {"http", "grpc", "metrics"}
        assert all(port > 0 for port in server.ports.values())
        server.stop()
    assert server.process.returncode == 0
    assert not ready.exists()  # removed on a clean stop


def test_unknown_flag_fails_loudly(example_repo: Path) -> None:
    done = _run("--model-repository", str(example_repo), "--no-such-flag", "1")
    assert done.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in done.stderr


def test_load_model_needs_explicit_mode(example_repo: Path) -> None:
    done = _run("--model-repository", str(example_repo), "--load-model", "simple")
    assert done.returncode == 2
    assert "--load-model can only be used with --model-control-mode=explicit" in done.stderr


def test_missing_repository_is_reported(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    done = _run(
        "--model-repository",
        str(missing),
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        "--metrics-port",
        "0",
        "--http-address",
        "127.0.0.1",
        "--grpc-address",
        "127.0.0.1",
    )
    assert done.returncode != 0
    assert str(missing) in done.stderr


@pytest.mark.parametrize("taken", ["http", "grpc", "metrics"])
def test_a_taken_port_is_one_line_without_a_traceback(tmp_path: Path, taken: str) -> None:
    import socket

    (tmp_path / "empty").mkdir()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        ports = {name: "0" for name in ("http", "grpc", "metrics")}
        ports[taken] = str(port)
        done = _run(
            "--model-repository",
            str(tmp_path / "empty"),
            *(arg for name, value in ports.items() for arg in (f"--{name}-port", value)),
            "--http-address",
            "127.0.0.1",
            "--grpc-address",
            "127.0.0.1",
        )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert str(port) in done.stderr
