"""Start ``inferd serve`` as a child process on ports it picks and reports (no port races)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    ports: dict[str, int]
    log_path: Path

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
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


READY_MARKER = "inferd ready: "


def start_server(
    repositories: Sequence[str | Path],
    args: Sequence[str] = (),
    *,
    startup_timeout_s: float = 60.0,
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """Start a server on 127.0.0.1 with every port 0; return once it has reported its ports.

    The child's output is copied to a log file by a reader thread, which also spots the line
    the server prints once every endpoint is listening.
    """
    workdir = Path(tempfile.mkdtemp(prefix="inferd-test-"))
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
    process = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
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
                    payload = text.split(READY_MARKER, 1)[1]
                    found.update(json.loads(payload))
                    ready.set()
        ready.set()  # the process ended: wake the waiter

    threading.Thread(target=pump, name="inferd-log-pump", daemon=True).start()
    if not ready.wait(startup_timeout_s):
        process.kill()
        process.wait()
        raise RuntimeError(f"inferd serve did not start in time:\n{log_path.read_text()}")
    if not found:
        process.wait()
        raise RuntimeError(
            f"inferd serve exited with {process.returncode}:\n{log_path.read_text()}"
        )
    return ServerProcess(process, found, log_path)


@contextmanager
def running_server(
    repositories: Sequence[str | Path], args: Sequence[str] = (), **kwargs: object
) -> Iterator[ServerProcess]:
    """:func:`start_server` as a context manager. Its working folder (the server's log) is
    removed after a clean exit and kept, for reading, when the body raised."""
    server = start_server(repositories, args, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()
    shutil.rmtree(server.log_path.parent, ignore_errors=True)
