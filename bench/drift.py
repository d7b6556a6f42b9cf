"""Drift monitoring's goals on the fraud model, in one run.

    flock /tmp/bench.lock .venv/bin/python bench/drift.py [--seconds 5] [--rounds 3]
        [--parts detection,throughput]

1. Profiles ``fraud_xgboost`` (a copy of examples/models/fraud_xgboost) with
   ``inferd monitor profile`` from its training rows.
2. Detection: ``inferd serve --monitor-drift`` (default settings) gets 20,000 one-row requests
   drawn with replacement from the 2,500 held-out rows (in distribution; a harder null than
   production traffic, since a finite pool adds its own deviation from the training rows),
   then a stream whose one feature is
   shifted by 0.25 of its standard deviation; a fresh server repeats the shift for other
   features after a 2,000-request warm-up. Requests go over gRPC in chunks of 100 (8 in
   flight); after each chunk the report is read once the monitor has seen every row, so the
   figures are exact to 100 requests. Goals: no alert in the 20,000; an alert within 2,000
   shifted requests.
3. Cost: ``inferd perf`` at concurrency 32 over gRPC against the server with monitoring off
   and on, rounds interleaved (the figure is each side's median). Goal: monitoring costs at
   most 5% of throughput.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from inferd.examples.tabular_models import fraud_split
from inferd.testing import ServerProcess, running_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "models" / "fraud_xgboost"
CHUNK = 100


def _profile(repo: Path, x_train: np.ndarray) -> None:
    shutil.copytree(EXAMPLE, repo / "fraud_xgboost")
    data = repo.parent / "train.npz"
    np.savez(data, input__0=x_train)
    subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "monitor", "profile", "fraud_xgboost",
         "--model-repository", str(repo), "--data", str(data)],
        check=True,
    )  # fmt: skip


def _report(server: ServerProcess) -> dict[str, Any] | None:
    url = f"http://{server.http_url}/v2/models/fraud_xgboost/drift"
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            version: dict[str, Any] = json.load(reply)["versions"][0]
            return version
    except urllib.error.HTTPError:
        return None  # nothing observed yet


class Stream:
    """One-row requests over gRPC, in chunks; the report after each chunk."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.sent = 0
        self._clients = [grpcclient.InferenceServerClient(server.grpc_url) for _ in range(8)]
        self._pool = ThreadPoolExecutor(8)

    def _one(self, index: int, row: np.ndarray) -> None:
        tensor = grpcclient.InferInput("input__0", [1, row.size], "FP32")
        tensor.set_data_from_numpy(row.reshape(1, -1))
        self._clients[index % 8].infer("fraud_xgboost", [tensor])

    def chunk(self, rows: np.ndarray) -> dict[str, Any]:
        list(self._pool.map(self._one, range(len(rows)), rows))
        self.sent += len(rows)
        deadline = time.monotonic() + 30
        while True:
            version = _report(self.server)
            if version is not None and version["rows"] >= self.sent:
                return version
            if time.monotonic() > deadline:
                raise RuntimeError("the monitor did not catch up within 30 s")
            time.sleep(0.02)

    def close(self) -> None:
        self._pool.shutdown()


def _shift_trial(
    repo: Path, held_out: np.ndarray, sd: np.ndarray, feature: int, warmup: int, seed: int
) -> tuple[int | None, int, int | None]:
    """(first in-distribution request with an alert, evaluations, shifted requests to alert)."""
    rng = np.random.default_rng(seed)
    with running_server([repo], ["--monitor-drift"]) as server:
        stream = Stream(server)
        false_alarm = None
        report: dict[str, Any] = {}
        for _ in range(warmup // CHUNK):
            report = stream.chunk(held_out[rng.integers(len(held_out), size=CHUNK)])
            if report["alerts"] and false_alarm is None:
                false_alarm = stream.sent
        evaluations = int(report.get("evaluations", 0))
        start = stream.sent
        detected = None
        while stream.sent - start < 5000:
            rows = held_out[rng.integers(len(held_out), size=CHUNK)].copy()
            rows[:, feature] += 0.25 * sd[feature]
            report = stream.chunk(rows)
            if f"input__0[{feature}]" in report["alerts"]:
                detected = stream.sent - start
                break
        stream.close()
    return false_alarm, evaluations, detected


def _throughput(server: ServerProcess, seconds: float) -> tuple[float, float]:
    """(inferences per second, server CPU milliseconds per 1,000 inferences)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            [sys.executable, "-m", "inferd.cli.main", "perf", "-m", "fraud_xgboost",
             "-u", server.grpc_url, "-i", "grpc", "--concurrency-range", "32",
             "-p", str(int(seconds * 1000)), "-q", "--server-pid", str(server.pid),
             "--json-output", out.name],
            check=True, capture_output=True,
        )  # fmt: skip
        point = json.loads(Path(out.name).read_text())["points"][0]
        cpu = point["cost"].get("server_cpu_s_per_1000") or float("nan")
        return float(point["throughput"]), 1000 * float(cpu)


def _detection(repo: Path, x_test: np.ndarray, sd: np.ndarray) -> None:
    print("\n== detection (one-row requests, default settings) ==")
    trials = [(0, 20_000), (3, 20_000), (7, 2_000), (15, 2_000)]
    for seed, (feature, warmup) in enumerate(trials):
        false_alarm, evaluations, detected = _shift_trial(repo, x_test, sd, feature, warmup, seed)
        print(
            f"feature {feature:2d}: {warmup} in-distribution requests "
            f"({evaluations} evaluations): "
            f"{'no alert' if false_alarm is None else f'ALERT at request {false_alarm}'}; "
            f"0.25 sd shift: "
            f"{'no alert in 5000' if detected is None else f'alert after {detected}'} "
            "requests"
        )


def _cost(repo: Path, seconds: float, rounds: int) -> None:
    print("\n== throughput, inferd perf, gRPC, concurrency 32 ==")
    figures: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    sides = [("off", []), ("on", ["--monitor-drift"])]
    for round_ in range(rounds):
        for side, flags in sides if round_ % 2 == 0 else sides[::-1]:  # alternate the order
            with running_server([repo], flags) as server:
                figures[side].append(_throughput(server, seconds))
    for side, values in figures.items():
        print(
            f"monitoring {side:3s}: "
            + ", ".join(f"{t:.0f}/s ({c:.0f} ms CPU/1000)" for t, c in values)
        )
    off = [statistics.median(v) for v in zip(*figures["off"], strict=True)]
    on = [statistics.median(v) for v in zip(*figures["on"], strict=True)]
    print(
        f"median: off {off[0]:.0f}/s, on {on[0]:.0f}/s: throughput cost "
        f"{100 * (1 - on[0] / off[0]):.1f}%; server CPU per 1000 inferences "
        f"{off[1]:.0f} -> {on[1]:.0f} ms ({100 * (on[1] / off[1] - 1):+.1f}%)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="perf measurement window")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved throughput rounds")
    parser.add_argument(
        "--parts",
        default="detection,throughput",
        help="what to measure, comma-separated (default: detection,throughput)",
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    x_train, x_test, _, _ = fraud_split()
    sd = x_train.std(axis=0)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        repo.mkdir()
        _profile(repo, x_train)

        if "detection" in parts:
            _detection(repo, x_test, sd)
        if "throughput" in parts:
            _cost(repo, args.seconds, args.rounds)


if __name__ == "__main__":
    main()
