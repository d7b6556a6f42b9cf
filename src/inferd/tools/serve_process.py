"""``inferd serve`` as a child process on ports it picks and reports (no port races).

The tools that start a server of their own (``inferd analyze``) and the test helpers
(:mod:`inferd.testing.process`) both start it here: every port 0 on 127.0.0.1, the child's output
copied to a log file by a reader thread that also spots the line the server prints once every
endpoint listens, and the ports read from that line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from inferd.errors import ServerStartError

__all__ = ["READY_MARKER", "ServerProcess", "ServerStartError", "start_server"]

#: Set to K, every server started here without ``--frontends`` of its own gets ``--frontends K``.
FRONTENDS_ENV = "INFERD_TEST_FRONTENDS"

#: What ``inferd serve`` prints, followed by its ports as JSON, once every endpoint listens.
READY_MARKER = "inferd ready: "


@dataclass
class ServerProcess:
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

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        """Send ``sig`` (SIGTERM: a graceful stop), kill it after ``timeout_s``; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_server(
    repositories: Sequence[str | Path],
    args: Sequence[str] = (),
    *,
    startup_timeout_s: float = 60.0,
    env: dict[str, str] | None = None,
    log_prefix: str = "inferd-serve-",
) -> ServerProcess:
    """Start a server on 127.0.0.1 with every port 0 and ``args`` added; return once it has
    reported its ports. Raise :class:`ServerStartError` with its log if it exits first or does
    not report in ``startup_timeout_s``."""
    workdir = Path(tempfile.mkdtemp(prefix=log_prefix))
    log_path = workdir / "server.log"
    cmd = [sys.executable, "-m", "inferd.cli.main", "serve"]
    for repo in repositories:
        cmd += ["--model-repository", str(repo)]
    cmd += [
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
        *args,
    ]
    # the end-to-end suite runs against front-end processes with INFERD_TEST_FRONTENDS=K
    frontends = (env or {}).get(FRONTENDS_ENV, os.environ.get(FRONTENDS_ENV, ""))
    if frontends and not any(a == "--frontends" or a.startswith("--frontends=") for a in args):
        cmd += ["--frontends", frontends]
    process = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    ready = threading.Event()
    found: dict[str, int] = {}

    def pump() -> None:
        assert process.stdout is not None
        # closing the pipe here, at EOF, keeps the Popen object from leaking it (ResourceWarning)
        with process.stdout, log_path.open("wb") as log:
            for line in process.stdout:
                log.write(line)
                log.flush()
                text = line.decode(errors="replace")
                if not ready.is_set() and READY_MARKER in text:
                    found.update(json.loads(text.split(READY_MARKER, 1)[1]))
                    ready.set()
        ready.set()  # the process ended: wake the waiter

    threading.Thread(target=pump, name="inferd-serve-log", daemon=True).start()
    server = ServerProcess(process, found, log_path)
    if not ready.wait(startup_timeout_s):
        process.kill()
        process.wait()
        raise ServerStartError(
            f"inferd serve did not start in time (log: {log_path}):\n{server.log()}"
        )
    if not found:
        process.wait()
        raise ServerStartError(
            f"inferd serve exited with {process.returncode} (log: {log_path}):\n{server.log()}"
        )
    return server
