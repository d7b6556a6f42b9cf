"""``inferd perf`` beside NVIDIA's perf_analyzer: the same server, the same load points.

One ``inferd serve`` (the example repository's ``simple`` model) is started; for each protocol
(HTTP, gRPC) and concurrency, perf_analyzer and ``inferd perf`` run one after the other with the
same window, stability and trial settings (in the order A B B A, each figure the mean of its
two runs), each writing perf_analyzer's CSV, which this script reads back. It prints a
Markdown table: throughput and p50 latency of each, and their ratios.

perf_analyzer is found at ``$INFERD_PERF_ANALYZER`` or ``~/.cache/perf_analyzer/perf_analyzer``.
Run it alone on the machine:

    flock /tmp/bench.lock .venv/bin/python bench/perf_vs_perf_analyzer.py
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PA = Path.home() / ".cache" / "perf_analyzer" / "perf_analyzer"


def read_csv(path: Path) -> dict[str, float]:
    with path.open() as f:
        row = next(csv.DictReader(f))
    return {"throughput": float(row["Inferences/Second"]), "p50": float(row["p50 latency"])}


def measure(cmd: list[str], out: Path) -> dict[str, float] | None:
    """The tool's CSV figures and the cores it used on average (its CPU time over its run
    time); None when it gave none (perf_analyzer exits 2 on a point that never settles), after
    one more try."""
    for _ in range(2):
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        done = subprocess.run([*cmd, "-f", str(out)], capture_output=True, text=True, timeout=900)
        after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - start
        if done.returncode == 0:
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            return {**read_csv(out), "cores": cpu / wall}
        print(f"  {Path(cmd[0]).name} exited {done.returncode}: {done.stdout.strip()[-200:]}")
    return None


def mean(results: Iterable[dict[str, float] | None]) -> dict[str, float] | None:
    taken = [r for r in results if r is not None]
    if not taken:
        return None
    return {key: sum(r[key] for r in taken) / len(taken) for key in taken[0]}


def cells(theirs: dict[str, float] | None, ours: dict[str, float] | None, key: str) -> str:
    a = f"{theirs[key]:.0f}" if theirs else "unstable"
    b = f"{ours[key]:.0f}" if ours else "unstable"
    ratio = f"{ours[key] / theirs[key]:.2f}" if theirs and ours else "—"
    return f"{a} | {b} | {ratio}"


def cores(figures: dict[str, float] | None) -> str:
    return f"{figures['cores']:.2f}" if figures else "—"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,8,16,32")
    parser.add_argument("--window-ms", type=int, default=2000)
    parser.add_argument("--max-trials", type=int, default=10)
    # 2 shared cores are noisy: perf_analyzer exits 2 when a point does not settle
    parser.add_argument("--stability-percentage", type=float, default=20.0)
    parser.add_argument("--model", default="simple")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the server on CPU 0 and the load generators on CPU 1 (they do not compete)",
    )
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "src"))
    from inferd.testing import running_server

    pa = Path(os.environ.get("INFERD_PERF_ANALYZER", DEFAULT_PA))
    if not pa.exists():
        raise SystemExit(f"perf_analyzer not found at {pa}: set INFERD_PERF_ANALYZER")
    inferd = [sys.executable, "-m", "inferd.cli.main", "perf", "-q"]
    common = ["-m", args.model, "-p", str(args.window_ms), "-r", str(args.max_trials)]
    common += ["-s", str(args.stability_percentage)]
    rows = []
    server_args = ["--model-control-mode", "explicit", "--load-model", args.model]
    with running_server([ROOT / "examples" / "models"], server_args) as server:
        if args.pin:
            subprocess.run(["taskset", "-a", "-p", "-c", "0", str(server.process.pid)], check=True)
            pa_cmd, inferd = ["taskset", "-c", "1", str(pa)], ["taskset", "-c", "1", *inferd]
        else:
            pa_cmd = [str(pa)]
        for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            for concurrency in [int(c) for c in args.concurrency.split(",")]:
                load = [*common, "-i", protocol, "-u", url, "--concurrency-range", str(concurrency)]
                with tempfile.TemporaryDirectory() as tmp:
                    # A B B A: a drift of the machine during the pair weighs on both alike
                    first = measure([*pa_cmd, *load], Path(tmp) / "pa.csv")
                    ours = mean(measure([*inferd, *load], Path(tmp) / "inferd.csv") for _ in "ab")
                    theirs = mean([first, measure([*pa_cmd, *load], Path(tmp) / "pa.csv")])
                rows.append((protocol, concurrency, theirs, ours))
                print(f"{protocol} c={concurrency}: perf_analyzer {theirs} inferd perf {ours}")
    print()
    print(
        "| protocol | concurrency | perf_analyzer infer/s | inferd perf infer/s | ratio "
        "| perf_analyzer p50 (usec) | inferd perf p50 (usec) | ratio "
        "| perf_analyzer cores | inferd perf cores |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for protocol, concurrency, theirs, ours in rows:
        print(
            f"| {protocol} | {concurrency} | {cells(theirs, ours, 'throughput')} | "
            f"{cells(theirs, ours, 'p50')} | {cores(theirs)} | {cores(ours)} |"
        )


if __name__ == "__main__":
    main()
