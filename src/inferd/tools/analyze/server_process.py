"""The ``inferd serve`` the analyzer starts for itself: a child process in explicit
model-control mode, on ports the system picks (it prints them once every endpoint listens)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from inferd.errors import InferdError

__all__ = ["ServerStartError", "StartedServer", "start_server"]

READY_MARKER = "inferd ready: "


class ServerStartError(InferdError):
    """``inferd serve`` exited or did not report its ports in time."""


@dataclass
class StartedServer:
    process: subprocess.Popen[bytes]
    ports: dict[str, int]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports['http']}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    @property
    def metrics_url(self) -> str:
        return f"127.0.0.1:{self.ports['metrics']}"

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(
    repository: Path,
    models: Sequence[str],
    extra_args: Sequence[str] = (),
    *,
    startup_timeout_s: float = 120.0,
) -> StartedServer:
    """Start ``inferd serve`` over ``repository`` with ``models`` loaded; return once it reports
    its ports. Its output goes to a log file (named in errors)."""
    log_dir = Path(tempfile.mkdtemp(prefix="inferd-analyze-"))
    log_path = log_dir / "server.log"
    cmd = [
        sys.executable,
        "-m",
        "inferd.cli.main",
        "serve",
        "--model-repository",
        str(repository),
        "--model-control-mode",
        "explicit",
        "--http-address",
        "127.0.0.1",
        "--http-port",
        "0",
        "--grpc-address",
        "127.0.0.1",
        "--grpc-port",
        "0",
        "--metrics-port",
        "0",
    ]
    for model in models:
        cmd += ["--load-model", model]
    cmd += list(extra_args)
    process = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    ready = threading.Event()
    found: dict[str, int] = {}

    def pump() -> None:
        assert process.stdout is not None
        with process.stdout, log_path.open("wb") as log:
            for line in process.stdout:
                log.write(line)
                log.flush()
                text = line.decode(errors="replace")
                if not ready.is_set() and READY_MARKER in text:
                    found.update(json.loads(text.split(READY_MARKER, 1)[1]))
                    ready.set()
        ready.set()

    threading.Thread(target=pump, name="inferd-analyze-server-log", daemon=True).start()
    server = StartedServer(process, found, log_path)
    if not ready.wait(startup_timeout_s) or not found:
        server.stop()
        raise ServerStartError(
            f"inferd serve did not start (log: {log_path}):\n{server.log_tail()}"
        )
    return server
