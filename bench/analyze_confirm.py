"""perf_analyzer's independent check of a config ``inferd analyze`` chose: the same model served
by ``inferd serve`` from two repositories (the model's own config, and the chosen one), measured
in alternating rounds with perf_analyzer over HTTP, so both see the same machine.

    bash scripts/get-perf-analyzer.sh          # once: installs perf_analyzer
    flock /tmp/bench.lock .venv/bin/python bench/analyze_confirm.py \\
        MODEL DEFAULT_REPO CHOSEN_REPO \\
        [--concurrency 16] [--rounds 3] [--interval-ms 2000] [--input-npz FILE]

``--input-npz`` gives the request's tensors (one row each, as ``bench/models.py`` writes them for
MiniLM); without it perf_analyzer sends random data. Prints each round's throughput and p50, then
the means and medians of both and their ratio (chosen / default).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from inferd.tools.serve_process import start_server

PERF_ANALYZER = Path(
    os.environ.get("PERF_ANALYZER", "/root/.cache/perf_analyzer/perf_analyzer")
).expanduser()


def input_file(npz: Path, out: Path) -> Path:
    """perf_analyzer's JSON input data: the tensors of ``npz`` without their batch dimension."""
    with np.load(npz) as arrays:
        entry = {
            name: {
                "content": arrays[name][0].ravel().tolist(),
                "shape": list(arrays[name].shape[1:]),
            }
            for name in arrays.files
        }
    out.write_text(json.dumps({"data": [entry]}))
    return out


def measure(
    model: str, repo: Path, args: argparse.Namespace, data: Path | None, scratch: Path
) -> tuple[float, float]:
    """Throughput (infer/s) and p50 (ms) of one perf_analyzer run against a fresh server."""
    server = start_server([repo], ["--allow-grpc", "false", "--allow-metrics", "false"])
    try:
        csv_path = scratch / "round.csv"
        cmd = [
            str(PERF_ANALYZER),
            "-m",
            model,
            "-u",
            server.http_url,
            "-i",
            "http",
            "--concurrency-range",
            str(args.concurrency),
            "-p",
            str(args.interval_ms),
            "-s",
            "15",
            "-r",
            "10",
            "-f",
            str(csv_path),
        ]
        if data is not None:
            cmd += ["--input-data", str(data)]
        subprocess.run(cmd, check=True, capture_output=True)
        with csv_path.open() as f:
            row = next(csv.DictReader(f))
        return float(row["Inferences/Second"]), float(row["p50 latency"]) / 1000.0
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("default_repo", type=Path)
    parser.add_argument("chosen_repo", type=Path)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=2000)
    parser.add_argument("--input-npz", type=Path)
    args = parser.parse_args()
    if not PERF_ANALYZER.exists():
        sys.exit(f"{PERF_ANALYZER} not found: bash scripts/get-perf-analyzer.sh")

    figures: dict[str, list[tuple[float, float]]] = {"default": [], "chosen": []}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        data = input_file(args.input_npz, scratch / "data.json") if args.input_npz else None
        for r in range(args.rounds):
            for label, repo in (("default", args.default_repo), ("chosen", args.chosen_repo)):
                thr, p50 = measure(args.model, repo, args, data, scratch)
                figures[label].append((thr, p50))
                print(
                    f"round {r + 1} {label:8s} {thr:10.1f} infer/s  p50 {p50:8.2f} ms", flush=True
                )
    for how, fn in (("mean", statistics.fmean), ("median", statistics.median)):
        d = fn(t for t, _ in figures["default"])
        c = fn(t for t, _ in figures["chosen"])
        print(f"{how:6s}: default {d:.1f}, chosen {c:.1f} infer/s, ratio {c / d:.3f}")


if __name__ == "__main__":
    main()
