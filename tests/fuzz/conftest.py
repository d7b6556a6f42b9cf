"""Shared pieces of the fuzz suites: one live ``inferd serve`` per module, its memory, a tally.

The server runs the example repository in explicit model-control mode (so the repository
endpoints load and unload for real) with uploads off (the default), and loads the small ONNX
models that the fuzzers aim at. Each fuzz test checks afterwards that the process is alive,
that ``/v2/health/live`` answers, and that its resident memory grew by at most
:data:`RSS_GROWTH_LIMIT_BYTES` between a warmed-up start and the end of the run.
"""

from __future__ import annotations

import collections
import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from inferd.testing import ServerProcess, running_server

#: the models the fuzz server loads at start (ONNX Runtime, small; loading them is cheap, so
#: load/unload cycles run many times within a run)
FUZZ_MODELS = ("simple", "simple_int8", "simple_string", "digits")

#: bound on the server's resident memory growth over one fuzz run, after warm-up. Memory freed
#: by Python stays with the process partly (allocator arenas, fragmentation), so the bound is
#: not zero; a leak of a few hundred bytes per request over thousands of requests, or any
#: request body kept alive, passes it.
RSS_GROWTH_LIMIT_BYTES = 48 * 1024 * 1024


def fuzz_server_args() -> list[str]:
    # every extension on, so that the fuzz reaches the code behind each of them
    args = ["--model-control-mode", "explicit", "--allow-shared-memory=true"]
    for name in FUZZ_MODELS:
        args += ["--load-model", name]
    return args


@pytest.fixture(scope="module")
def fuzz_server(example_repo: Path) -> Iterator[ServerProcess]:
    """``inferd serve`` on the example repository, explicit model control, uploads off."""
    with running_server([example_repo], fuzz_server_args()) as proc:
        yield proc


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from ``/proc/<pid>/status`` (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def live_status(server: ServerProcess, timeout_s: float = 10.0) -> int:
    """Status of ``GET /v2/health/live`` on a fresh connection."""
    host, port = server.http_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        conn.request("GET", "/v2/health/live")
        reply = conn.getresponse()
        body = reply.read()
        assert json.loads(body) == {"live": True}, body
        return reply.status
    finally:
        conn.close()


def assert_server_healthy(server: ServerProcess, rss_before: int) -> int:
    """The process is alive, answers liveness, and its memory grew within the bound; returns
    the growth in bytes."""
    assert server.process.poll() is None, f"the server exited:\n{server.log()[-4000:]}"
    assert live_status(server) == 200
    growth = rss_bytes(server.process.pid) - rss_before
    assert growth <= RSS_GROWTH_LIMIT_BYTES, (
        f"server RSS grew by {growth / 2**20:.1f} MiB over the run "
        f"(bound {RSS_GROWTH_LIMIT_BYTES / 2**20:.0f} MiB)"
    )
    return growth


@dataclass
class Tally:
    """What a fuzz run sent and what came back, printed at the end of the test (``-s``)."""

    name: str
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    failures: list[str] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return sum(self.statuses.values())

    def record(self, outcome: int | str) -> None:
        self.statuses[str(outcome)] += 1

    def fail(self, message: str) -> None:
        self.failures.append(message)

    def report(self, seconds: float, rss_growth: int | None = None) -> str:
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
        memory = "" if rss_growth is None else f", server RSS growth {rss_growth / 2**20:+.1f} MiB"
        return (
            f"{self.name}: {self.sent} requests in {seconds:.1f} s{memory}; outcomes {{{counts}}}; "
            f"{len(self.failures)} failure(s)"
        )
