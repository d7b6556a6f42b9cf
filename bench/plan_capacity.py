"""One replica's capacity curve and start-up time, the inputs of ``inferd plan``.

    flock /tmp/bench.lock .venv/bin/python bench/plan_capacity.py [--model digits_cnn]
        [--concurrency 1,2,4,8,16,32,64,128] [--interval-ms 3000] [--starts 3]

1. Start-up: ``inferd serve --model-control-mode explicit --load-model MODEL`` on ephemeral
   ports, from the process's start until it reports every endpoint listening (inferd opens its
   ports once the models are loaded and warmed up), ``--starts`` times; the median is what a
   pod spends between its container starting and being ready, besides the image pull and the
   probes.
2. Capacity: ``inferd perf`` over HTTP at each concurrency against one server, with
   ``--server-pid`` so each point carries the server's CPU; the points are merged into one
   ``inferd perf --json-output`` document (what ``inferd plan --capacity`` reads).

Writes bench/results/<date>-plan-capacity-<model>.json and prints the curve.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from inferd.tools.serve_process import start_server

ROOT = Path(__file__).resolve().parents[1]


def startup_seconds(repo: Path, model: str) -> float:
    args = ["--model-control-mode", "explicit", "--load-model", model]
    started = time.perf_counter()
    server = start_server([repo], args, startup_timeout_s=180)
    elapsed = time.perf_counter() - started
    server.stop()
    return elapsed


def measure(repo: Path, model: str, levels: list[int], interval_ms: int) -> list[dict[str, Any]]:
    args = ["--model-control-mode", "explicit", "--load-model", model]
    server = start_server([repo], args, startup_timeout_s=180)
    points: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for level in levels:
                out = Path(tmp) / f"c{level}.json"
                cmd = [
                    sys.executable, "-m", "inferd.cli.main", "perf", "-m", model,
                    "-u", server.http_url, "--concurrency-range", str(level),
                    "-p", str(interval_ms), "--server-pid", str(server.pid),
                    "--json-output", str(out), "-q",
                ]  # fmt: skip
                subprocess.run(cmd, check=True)
                doc = json.loads(out.read_text())
                points.extend(doc["points"])
                settings = doc["settings"]
    finally:
        server.stop()
    return [{"settings": settings}, *points]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="digits_cnn")
    parser.add_argument("--repository", type=Path, default=ROOT / "examples" / "models")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32,64,128")
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    levels = [int(v) for v in args.concurrency.split(",")]

    starts = [startup_seconds(args.repository, args.model) for _ in range(args.starts)]
    print(f"start-up to ready: {', '.join(f'{s:.2f}' for s in starts)} s")
    settings, *points = measure(args.repository, args.model, levels, args.interval_ms)
    doc = {
        "format": "inferd-perf/1",
        "settings": {**settings["settings"], "levels": [float(v) for v in levels]},
        "points": points,
        "notes": [
            f"merged from one 'inferd perf' run per concurrency ({args.concurrency}) against "
            f"one 'inferd serve' of {args.model} over HTTP on this machine "
            "(bench/plan_capacity.py)",
            f"start-up to ready (process start to every port listening), {args.starts} starts: "
            + ", ".join(f"{s:.2f} s" for s in starts)
            + f"; median {statistics.median(starts):.2f} s",
        ],
    }
    stamp = time.strftime("%Y-%m-%d-%H%M")
    path = ROOT / "bench" / "results" / f"{stamp}-plan-capacity-{args.model}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(
        f"\n{'concurrency':>11} {'infer/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'queue ms':>8} "
        f"{'server CPU':>10} {'client CPU':>10}"
    )
    for p in points:
        cost = p.get("cost") or {}
        cpu = cost.get("server_cpu_s")
        cores = f"{cpu / p['duration_s']:.2f}" if cpu is not None else "-"
        queue = f"{p['server']['queue_us'] / 1000:.2f}" if p.get("server") else "-"
        print(
            f"{p['level']:>11g} {p['throughput']:>9.0f} {p['percentiles_us']['50'] / 1000:>7.2f} "
            f"{p['percentiles_us']['99'] / 1000:>7.2f} {queue:>8} {cores:>10} "
            f"{p['client_cpu_share']:>10.0%}"
        )
    print(f"\nwrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
