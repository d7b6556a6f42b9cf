"""``inferd serve --frontends K``: throughput and server CPU per request, K=1 against K=2.

    .venv/bin/python bench/frontends.py [--concurrency 32] [--seconds 10] [--protocol http]
                                        [--frontends 1,2] [--rounds 2]

Starts a server on the small MLP (64 -> 256 -> 256 -> 10, dynamic batching on) for each K in
turn, drives it with ``inferd perf`` at the given concurrency, and reads the CPU time of the
whole server (the engine process and every front-end process, from ``/proc``) around the
measurement. It prints requests per second and server CPU microseconds per request for each K,
and the ratios to the first K, all measured in this one run (rounds alternate the Ks so a
neighbour's load hits both alike).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import models as bench_models  # noqa: E402

from inferd.tools.serve_process import start_server  # noqa: E402

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
CONFIG = """
name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [ { name: "input" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching { }
"""


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) * TICK_S
    return total


def _served(url: str) -> int:
    with urllib.request.urlopen(f"http://{url}/v2/models/mlp/stats", timeout=10) as reply:
        stats = json.load(reply)
    return int(stats["model_stats"][0]["inference_count"])


def measure(repo: Path, frontends: int, args: argparse.Namespace) -> dict[str, float]:
    server = start_server([repo], ["--frontends", str(frontends)])
    try:
        url = server.http_url if args.protocol == "http" else server.grpc_url
        out = Path(tempfile.mkdtemp()) / "perf.json"
        cmd = [
            sys.executable,
            "-m",
            "inferd.cli.main",
            "perf",
            "-m",
            "mlp",
            "-u",
            url,
            "-i",
            args.protocol,
            "--concurrency-range",
            str(args.concurrency),
            "-p",
            str(int(args.seconds * 1000)),
            "--json-output",
            str(out),
        ]
        pids = _tree(server.pid)
        count0 = _served(server.http_url)
        cpu0, engine0, t0 = _cpu_s(pids), _cpu_s([server.pid]), time.monotonic()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        cpu1, engine1, t1 = _cpu_s(pids), _cpu_s([server.pid]), time.monotonic()
        # the server's own count (one place for every front end), warm-up included like the CPU
        requests = _served(server.http_url) - count0
        report = json.loads(out.read_text())
    finally:
        server.stop()
    throughput = float(report["points"][-1]["throughput"])
    return {
        "throughput": throughput,
        "cpu_us_per_request": 1e6 * (cpu1 - cpu0) / requests,
        "engine_us_per_request": 1e6 * (engine1 - engine0) / requests,
        "server_cores": (cpu1 - cpu0) / (t1 - t0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--frontends", default="1,2")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="inferd-frontends-bench-"))
    (work / "mlp" / "1").mkdir(parents=True)
    bench_models.build_mlp(bench_models.MLPS["mlp"], work / "mlp" / "1" / "model.onnx")
    (work / "mlp" / "config.pbtxt").write_text(CONFIG)
    counts = [int(k) for k in args.frontends.split(",")]
    results: dict[int, list[dict[str, float]]] = {k: [] for k in counts}
    for _ in range(args.rounds):
        for k in counts:
            results[k].append(measure(work, k, args))
    base = counts[0]
    print(
        f"small MLP, {args.protocol}, concurrency {args.concurrency}, {args.seconds:.0f} s, "
        f"{os.cpu_count()} CPUs, {args.rounds} rounds (best shown)"
    )
    best = {k: max(results[k], key=lambda r: r["throughput"]) for k in counts}
    for k in counts:
        r = best[k]
        print(
            f"  --frontends {k}: {r['throughput']:8.0f} infer/s  "
            f"{r['cpu_us_per_request']:6.0f} µs server CPU/request "
            f"({r['engine_us_per_request']:.0f} in the engine process)  "
            f"{r['server_cores']:.2f} cores  "
            f"(x{r['throughput'] / best[base]['throughput']:.2f} throughput, "
            f"x{r['cpu_us_per_request'] / best[base]['cpu_us_per_request']:.2f} CPU/request)"
        )
        for i, run in enumerate(results[k]):
            print(
                f"      round {i + 1}: {run['throughput']:.0f} infer/s, "
                f"{run['cpu_us_per_request']:.0f} µs/request"
            )


if __name__ == "__main__":
    main()
