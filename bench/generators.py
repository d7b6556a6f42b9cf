"""Load generators and server processes for the benchmarks: perf_analyzer, wrk, and a server
started in its own process group and stopped with it.

Shared by ``run.py`` and the other benchmark scripts, so every figure in ``bench/`` comes from
the same client invocations.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PERF_ANALYZER = Path(
    os.environ.get("PERF_ANALYZER")
    or os.environ.get("INFERD_PERF_ANALYZER")
    or Path.home() / ".cache/perf_analyzer/perf_analyzer"
)


def missing_generators() -> dict[str, str]:
    """The load generators that are not installed, each with how to install it."""
    missing = {}
    if not os.access(PERF_ANALYZER, os.X_OK):
        missing["perf_analyzer"] = (
            f"no executable {PERF_ANALYZER}: run bash scripts/get-perf-analyzer.sh "
            "or set PERF_ANALYZER"
        )
    if shutil.which("wrk") is None:
        missing["wrk"] = "not on PATH: apt-get install wrk"
    return missing


# -- processes ----------------------------------------------------------------------------------


def _get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except Exception:
        return 0


@contextmanager
def process(
    cmd: list[str],
    ready_url: str,
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout_s: float = 180,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start a server in its own process group, wait until ready_url answers 200, stop it after."""
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
        try:
            deadline = time.monotonic() + timeout_s
            while _get(ready_url) != 200:
                if proc.poll() is not None:
                    raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}; see {log}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{ready_url} not ready after {timeout_s}s; see {log}")
                time.sleep(0.25)
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


# -- load generators ----------------------------------------------------------------------------


def perf_analyzer(
    model: str,
    url: str,
    protocol: str,
    fmt: str,
    concurrency: int,
    data: Path,
    window_ms: int,
    trials: int,
    scratch: Path,
) -> dict[str, Any]:
    """One perf_analyzer run at one concurrency; its CSV row as figures, or ``{"error": ...}``.

    Stability as perf_analyzer defines it (``-s 50``: three windows within 50 % of each other);
    when none are found, three windows as they come, with a note saying so."""
    csv = scratch / f"pa-{model}-{protocol}-{fmt}-{concurrency}.csv"
    csv.unlink(missing_ok=True)
    cmd = [
        str(PERF_ANALYZER),
        "-m",
        model,
        "-u",
        url,
        "-i",
        protocol,
        "-b",
        "1",
        "--concurrency-range",
        str(concurrency),
        "--input-data",
        str(data),
        "-p",
        str(window_ms),
        "-r",
        str(trials),
    ]
    if protocol == "http":
        cmd += ["--input-tensor-format", fmt, "--output-tensor-format", fmt]
    cmd += ["-f", str(csv)]
    note = ""
    run = subprocess.run([*cmd, "-s", "50"], capture_output=True, text=True, timeout=300)
    if run.returncode != 0 and "stable" in run.stdout + run.stderr:
        # no 3 windows within 50% of each other: take 3 windows as they come, and say so
        note = "unstable: windows differ by more than 50%"
        run = subprocess.run(
            [*cmd[:-2], "-r", "3", "-s", "10000", *cmd[-2:]],
            capture_output=True,
            text=True,
            timeout=300,
        )
    if run.returncode != 0 or not csv.exists():
        tail = (run.stdout + run.stderr).strip().splitlines()[-3:]
        return {"error": " / ".join(tail)[:300]}
    header, row = csv.read_text().splitlines()[:2]
    values = dict(zip(header.split(","), row.split(","), strict=False))
    return {
        "throughput": float(values["Inferences/Second"]),
        "p50_us": float(values["p50 latency"]),
        "p99_us": float(values["p99 latency"]),
        "server_queue_us": float(values.get("Server Queue", 0) or 0),
        "server_infer_us": float(values.get("Server Compute Infer", 0) or 0),
        **({"note": note} if note else {}),
    }


WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = io.open("%(body)s"):read("*a")
done = function(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.status + summary.errors.timeout
  io.write(string.format("BENCHJSON {\\"requests\\": %%d, \\"duration_us\\": %%d, "
      .. "\\"errors\\": %%d, "
      .. "\\"p50_us\\": %%d, \\"p99_us\\": %%d}\\n", summary.requests, summary.duration, errors,
      latency:percentile(50), latency:percentile(99)))
end
"""


def wrk(
    url: str,
    body: Path,
    concurrency: int,
    seconds: int,
    scratch: Path,
    around: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """One wrk run (after a 1 s warm-up). ``around``, if given, is called just before and just
    after the measured window; its two readings are returned as ``around`` (e.g. CPU times)."""
    script = scratch / "post.lua"
    script.write_text(WRK_SCRIPT % {"body": body})
    base = ["wrk", "-t", "1", "-c", str(concurrency), "--timeout", "10s", "-s", str(script)]
    subprocess.run([*base, "-d", "1s", url], capture_output=True, timeout=60)  # warm-up
    before = around() if around is not None else None
    run = subprocess.run(
        [*base, "-d", f"{seconds}s", url], capture_output=True, text=True, timeout=seconds + 60
    )
    after = around() if around is not None else None
    found = re.search(r"BENCHJSON (\{.*\})", run.stdout)
    if not found:
        return {"error": (run.stdout + run.stderr).strip()[-300:]}
    stats = json.loads(found.group(1))
    ok = stats["requests"] - stats["errors"]
    if ok <= 0:  # a window too short for the server's latency measures nothing: say so
        return {
            "error": f"no request answered in {seconds} s ({stats['errors']} errors of "
            f"{stats['requests']})"
        }
    result: dict[str, Any] = {
        "throughput": ok / (stats["duration_us"] / 1e6),
        "p50_us": float(stats["p50_us"]),
        "p99_us": float(stats["p99_us"]),
        "ok": ok,
        "around": (before, after),
    }
    if stats["errors"]:
        result["note"] = f"{stats['errors']} errors of {stats['requests']}"
    return result
