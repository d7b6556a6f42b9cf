"""Python model throughput: inferd's worker processes vs MLServer's and LitServe's, in one run.

    .venv/bin/python bench/python_throughput.py [--seconds 5] [--concurrency 8 32]
                                                [--profile 32]

The same pure-Python model (bench/servers/py_features.py: per-row Python features + a small numpy
scorer on 1 KiB FP32 rows) is served, one server after the other, by

- inferd: a Triton-style ``model.py`` (bench/servers/inferd_features_model.py), ``backend:
  "python"``, ``instance_group [{ count: 2 }]`` (two worker processes), ``max_batch_size`` 64, with
  dynamic batching (``max_queue_delay_microseconds`` 500) and, for reference, without;
- MLServer 1.7.1 with ``parallel_workers: 2`` (bench/servers/mlserver_features.py), adaptive
  batching off and on (``max_batch_size`` 64, ``max_batch_time`` 0.0005);
- LitServe with ``workers_per_device=2`` on ``accelerator="cpu"``
  (bench/servers/litserve_features.py), batching off and on (``max_batch_size`` 64,
  ``batch_timeout`` 0.0005).

Each server first answers one request that is checked against ``score()`` computed here; then
the same ``wrk`` command (bench/run.py's script, one thread) posts the same KServe v2 JSON body
(one row, shape [1, 256]) at each concurrency: 1 s warm-up, then ``--seconds`` measured. Besides
throughput and latency it records the CPU time the server's whole process tree used per request.
All servers get ``OMP/OPENBLAS/MKL_NUM_THREADS=1`` (two worker processes on two cores; the BLAS
calls are tiny). It prints the table and the ratios inferd/MLServer and inferd/LitServe (against
each one's better variant at the same concurrency), and writes bench/results/<date>-python.md.

``--profile C`` then restarts inferd (batching on) and records it with py-spy (all processes,
``--subprocesses``) under wrk at concurrency C, writing a flame graph and a per-process summary of
the hottest functions into bench/.work/python-throughput/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
SERVERS = BENCH / "servers"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(SERVERS))

import envs  # noqa: E402
import generators  # noqa: E402
import profile_server  # noqa: E402
import py_features  # noqa: E402
import run as bench_run  # noqa: E402

WORK = BENCH / ".work" / "python-throughput"
RESULTS = BENCH / "results"
LOCAL = "127.0.0.1"
MODEL = "features"
MAX_BATCH = 64
QUEUE_DELAY_US = 500
WORKERS = 2
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

INFERD_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: {max_batch}
input [ {{ name: "input" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "output" data_type: TYPE_FP32 dims: [ {classes} ] }} ]
instance_group [ {{ kind: KIND_CPU count: {workers} }} ]
"""


@dataclass
class Cell:
    server: str
    variant: str
    concurrency: int
    throughput: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    cpu_us_per_req: float | None = None
    front_cpu_us_per_req: float | None = None  # the root process (HTTP front for inferd/MLServer)
    avg_batch: float | None = None
    load1: float = 0.0
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# -- inputs and checks ----------------------------------------------------------------------------


def request_row() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((1, py_features.WIDTH)).astype(np.float32)


def v2_body(x: np.ndarray) -> str:
    tensor = {
        "name": "input",
        "shape": list(x.shape),
        "datatype": "FP32",
        "data": x.ravel().tolist(),
    }
    return json.dumps({"inputs": [tensor]}, separators=(",", ":"))


def check_answer(url: str, body: str, expected: np.ndarray) -> None:
    """One request through the server: its output must be the model's output computed here."""
    req = urllib.request.Request(
        url, data=body.encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as response:
        answer = json.load(response)
    (out,) = answer["outputs"]
    got = np.asarray(out["data"], dtype=np.float32).reshape(expected.shape)
    if not np.allclose(got, expected, atol=1e-5):
        raise RuntimeError(f"{url} answered {got.ravel()[:4]}..., expected {expected.ravel()[:4]}")


# -- measuring ------------------------------------------------------------------------------------


def tree_cpu_s(root_pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) of root_pid itself and of the rest of its process group."""
    tick = os.sysconf("SC_CLK_TCK")
    root = rest = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == root_pid:  # pgrp (the servers run in their own session)
            ticks = int(fields[11]) + int(fields[12])
            if int(entry.name) == root_pid:
                root += ticks
            else:
                rest += ticks
    return root / tick, rest / tick


def measure(
    url: str, body: Path, concurrency: int, seconds: int, server_pid: int
) -> dict[str, Any]:
    """bench/generators.py's wrk run, with the server's CPU time read around the measured window."""
    result = generators.wrk(
        url, body, concurrency, seconds, WORK, around=lambda: tree_cpu_s(server_pid)
    )
    if "error" in result:
        return result
    cpu0, cpu1 = result.pop("around")
    ok = result["ok"]
    result["cpu_us_per_req"] = (sum(cpu1) - sum(cpu0)) * 1e6 / ok if ok > 0 else None
    result["front_cpu_us_per_req"] = (cpu1[0] - cpu0[0]) * 1e6 / ok if ok > 0 else None
    return result


def make_cell(
    server: str,
    variant: str,
    c: int,
    result: dict[str, Any],
    batches: tuple[tuple[int, int], tuple[int, int]] | None = None,
) -> Cell:
    cell = Cell(server, variant, c, load1=round(os.getloadavg()[0], 2))
    if "error" in result:
        cell.note = "failed: " + result["error"]
    else:
        cell.throughput, cell.p50_us, cell.p99_us = (
            result["throughput"],
            result["p50_us"],
            result["p99_us"],
        )
        cell.cpu_us_per_req = result["cpu_us_per_req"]
        if server != "litserve":  # LitServe's root only launches; its API servers are children
            cell.front_cpu_us_per_req = result["front_cpu_us_per_req"]
        cell.note = result.get("note", "")
    if batches is not None:
        (inf0, exe0), (inf1, exe1) = batches
        if exe1 > exe0:
            cell.avg_batch = round((inf1 - inf0) / (exe1 - exe0), 2)
    line = (
        cell.note
        if cell.throughput is None
        else (
            f"{cell.throughput:8.1f}/s p50 {cell.p50_us / 1e3:7.2f} ms"
            f" p99 {cell.p99_us / 1e3:7.2f} ms cpu {cell.cpu_us_per_req or 0:5.0f} us/req"
            f" (front {cell.front_cpu_us_per_req or 0:4.0f})"
            + (f" batch {cell.avg_batch}" if cell.avg_batch else "")
            + (f" ({cell.note})" if cell.note else "")
        )
    )
    print(f"  {server:8} {variant:20} c={c:<3} {line}", flush=True)
    return cell


@contextmanager
def serving(
    cmd: list[str], ready_url: str, log: Path, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """bench/generators.py's process(), then wait until the server's whole process group is gone.

    process() waits for the root process only; LitServe's workers outlive it for tens of
    seconds, busy on two cores, and would skew the next cells. SIGKILL after 15 s."""
    pgid = 0
    try:
        with generators.process(cmd, ready_url, log, env=server_env(), cwd=cwd) as proc:
            pgid = proc.pid
            yield proc
    finally:
        deadline = time.monotonic() + 15
        while pgid and group_alive(pgid):
            if time.monotonic() > deadline:
                os.killpg(pgid, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.2)


def group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


# -- servers --------------------------------------------------------------------------------------


def server_env(**extra: str) -> dict[str, str]:
    return dict(os.environ, **THREAD_ENV, PYTHONPATH=str(SERVERS), **extra)


def inferd_repo(batching: bool) -> Path:
    root = WORK / f"inferd-repo-{'on' if batching else 'off'}"
    shutil.rmtree(root, ignore_errors=True)
    version = root / MODEL / "1"
    version.mkdir(parents=True)
    config = INFERD_CONFIG.format(
        name=MODEL,
        max_batch=MAX_BATCH,
        width=py_features.WIDTH,
        classes=py_features.CLASSES,
        workers=WORKERS,
    )
    if batching:
        config += f"dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}\n"
    (root / MODEL / "config.pbtxt").write_text(config)
    shutil.copy(SERVERS / "inferd_features_model.py", version / "model.py")
    shutil.copy(SERVERS / "py_features.py", version / "py_features.py")
    return root


def inferd_command(batching: bool) -> list[str]:
    inferd = Path(sys.executable).parent / "inferd"
    return [
        str(inferd),
        "serve",
        "--model-repository",
        str(inferd_repo(batching)),
        "--http-port",
        "18000",
        "--grpc-port",
        "18001",
        "--metrics-port",
        "18002",
    ]


def inferd_stats() -> tuple[int, int]:
    return bench_run._stats(f"{LOCAL}:18000", MODEL)


def bench_inferd(levels: list[int], seconds: int, body: Path, expected: np.ndarray) -> list[Cell]:
    cells = []
    url = f"http://{LOCAL}:18000/v2/models/{MODEL}/infer"
    for batching in (True, False):
        variant = "2 workers, batching" if batching else "2 workers"
        log = WORK / f"inferd-{'on' if batching else 'off'}.log"
        with serving(
            inferd_command(batching), f"http://{LOCAL}:18000/v2/models/{MODEL}/ready", log
        ) as proc:
            check_answer(url, body.read_text(), expected)
            for c in levels:
                before = inferd_stats()
                result = measure(url, body, c, seconds, proc.pid)
                cells.append(make_cell("inferd", variant, c, result, (before, inferd_stats())))
    return cells


def bench_mlserver(levels: list[int], seconds: int, body: Path, expected: np.ndarray) -> list[Cell]:
    py = envs.ensure("mlserver")
    cells = []
    url = f"http://{LOCAL}:18100/v2/models/{MODEL}/infer"
    for batching in (False, True):
        variant = "2 workers, batching" if batching else "2 workers"
        root = WORK / f"mlserver-{'on' if batching else 'off'}"
        shutil.rmtree(root, ignore_errors=True)
        (root / MODEL).mkdir(parents=True)
        (root / "settings.json").write_text(
            json.dumps(
                {
                    "http_port": 18100,
                    "grpc_port": 18101,
                    "metrics_port": 18102,
                    "host": LOCAL,
                    "parallel_workers": WORKERS,
                }
            )
        )
        settings: dict[str, Any] = {
            "name": MODEL,
            "implementation": "mlserver_features.FeaturesModel",
        }
        if batching:
            settings |= {"max_batch_size": MAX_BATCH, "max_batch_time": QUEUE_DELAY_US / 1e6}
        (root / MODEL / "model-settings.json").write_text(json.dumps(settings))
        cmd = [str(py.parent / "mlserver"), "start", str(root)]
        with serving(
            cmd, f"http://{LOCAL}:18100/v2/models/{MODEL}/ready", root.with_suffix(".log"), cwd=root
        ) as proc:
            check_answer(url, body.read_text(), expected)
            for c in levels:
                cells.append(
                    make_cell("mlserver", variant, c, measure(url, body, c, seconds, proc.pid))
                )
    return cells


def bench_litserve(levels: list[int], seconds: int, body: Path, expected: np.ndarray) -> list[Cell]:
    py = envs.ensure("litserve")
    cells = []
    url = f"http://{LOCAL}:18200/predict"
    for batching in (False, True):
        variant = "2 workers, batching" if batching else "2 workers"
        batch, delay = (MAX_BATCH, QUEUE_DELAY_US / 1e6) if batching else (1, 0.0)
        cmd = [
            str(py),
            str(SERVERS / "litserve_features.py"),
            "18200",
            str(WORKERS),
            str(batch),
            str(delay),
        ]
        log = WORK / f"litserve-{'on' if batching else 'off'}.log"
        with serving(cmd, f"http://{LOCAL}:18200/health", log, cwd=SERVERS) as proc:
            check_answer(url, body.read_text(), expected)
            for c in levels:
                cells.append(
                    make_cell("litserve", variant, c, measure(url, body, c, seconds, proc.pid))
                )
    return cells


# -- profile --------------------------------------------------------------------------------------


def profile_inferd(c: int, seconds: int, body: Path, rate: int = 200) -> str:
    """py-spy over inferd (server + workers) under wrk at concurrency c; returns a summary."""
    py_spy = Path(sys.executable).parent / "py-spy"
    url = f"http://{LOCAL}:18000/v2/models/{MODEL}/infer"
    raw = WORK / "profile.txt"
    duration = seconds + 2  # covers measure()'s 1 s warm-up and the measured window
    with serving(
        inferd_command(True),
        f"http://{LOCAL}:18000/v2/models/{MODEL}/ready",
        WORK / "inferd-profile.log",
    ) as proc:
        spy = subprocess.Popen(
            [
                str(py_spy),
                "record",
                "--pid",
                str(proc.pid),
                "--subprocesses",
                "--threads",
                "--nonblocking",
                "--rate",
                str(rate),
                "--duration",
                str(duration),
                "--format",
                "raw",
                "-o",
                str(raw),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        result = measure(url, body, c, seconds, proc.pid)
        spy.wait(timeout=120)
    front, rest = result.get("front_cpu_us_per_req") or 0, result.get("cpu_us_per_req") or 0
    text = (
        f"CPU per request without py-spy is in the table; under py-spy: front {front:.0f} us, "
        f"all {rest:.0f} us\n"
        f"wrk c={c} under py-spy: {result.get('throughput', 0):.0f}/s; py-spy {rate} Hz for "
        f"{duration} s without --idle, so samples / {rate * duration} ~ share of one core\n"
        + profile_server.summarize_per_process(raw)
    )
    (WORK / "profile-summary.txt").write_text(text)
    return text


# -- report ---------------------------------------------------------------------------------------


def best(cells: list[Cell], server: str, c: int) -> Cell | None:
    candidates = [x for x in cells if x.server == server and x.concurrency == c and x.throughput]
    return max(candidates, key=lambda x: x.throughput or 0.0, default=None)


def ratios(cells: list[Cell], levels: list[int]) -> tuple[list[str], bool]:
    lines, holds = [], True
    for c in levels:
        ours = next(
            (
                x
                for x in cells
                if x.server == "inferd"
                and x.concurrency == c
                and x.variant == "2 workers, batching"
                and x.throughput
            ),
            None,
        )
        for other in ("mlserver", "litserve"):
            theirs = best(cells, other, c)
            if ours is None or theirs is None or not theirs.throughput:
                lines.append(f"c={c}: inferd/{other}: not measured")
                holds = False
                continue
            ratio = (ours.throughput or 0.0) / theirs.throughput
            holds = holds and ratio >= 2.0
            lines.append(
                f"c={c}: inferd (batching) {ours.throughput:.0f}/s / {other} best "
                f"({theirs.variant}) {theirs.throughput:.0f}/s = {ratio:.2f}x"
                f"  [p99 {ours.p99_us / 1e3 if ours.p99_us else 0:.1f} ms vs "
                f"{theirs.p99_us / 1e3 if theirs.p99_us else 0:.1f} ms]"
            )
    return lines, holds


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "—" if value is None else f"{value / scale:.{digits}f}"


def table(cells: list[Cell]) -> str:
    rows = [
        "| server | variant | conc | infer/s | p50 ms | p99 ms | server CPU us/req | "
        "front process CPU us/req | avg batch | load1 | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in cells:
        rows.append(
            f"| {x.server} | {x.variant} | {x.concurrency} | {_fmt(x.throughput)} | "
            f"{_fmt(x.p50_us, 1e3, 2)} | {_fmt(x.p99_us, 1e3, 2)} | "
            f"{_fmt(x.cpu_us_per_req, 1, 0)} | {_fmt(x.front_cpu_us_per_req, 1, 0)} | "
            f"{x.avg_batch or ''} | {x.load1} | {x.note} |"
        )
    return "\n".join(rows)


def versions() -> dict[str, str]:
    return envs.versions(
        {
            "project": ["inferd", "numpy", "uvicorn"],
            "mlserver": ["mlserver", "numpy", "uvicorn"],
            "litserve": ["litserve", "numpy", "uvicorn"],
        }
    )


def single_call_us(x: np.ndarray, rows: int) -> float:
    """In-process cost of score() on a batch of `rows` rows, per row (median of 50 calls)."""
    batch = np.repeat(x, rows, axis=0)
    samples = []
    for _ in range(50):
        t0 = time.perf_counter_ns()
        py_features.score(batch)
        samples.append(time.perf_counter_ns() - t0)
    return float(np.median(samples)) / 1e3 / rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5, help="measured seconds per cell")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--only", choices=["inferd", "mlserver", "litserve"], action="append")
    parser.add_argument(
        "--profile",
        type=int,
        metavar="C",
        help="afterwards, py-spy inferd under wrk at concurrency C",
    )
    args = parser.parse_args()
    servers = args.only or ["inferd", "mlserver", "litserve"]
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install -y wrk")
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    x = request_row()
    expected = py_features.score(x)
    body = WORK / "body.json"
    body.write_text(v2_body(x))
    started = dt.datetime.now()
    model_cost = {rows: single_call_us(x, rows) for rows in (1, 32)}
    print(
        f"model in-process: {model_cost[1]:.0f} us per row at batch 1, "
        f"{model_cost[32]:.0f} us per row at batch 32",
        flush=True,
    )

    cells: list[Cell] = []
    runners = {"inferd": bench_inferd, "mlserver": bench_mlserver, "litserve": bench_litserve}
    for name in servers:
        print(f"== {name}", flush=True)
        cells += runners[name](args.concurrency, args.seconds, body, expected)
    minutes = (dt.datetime.now() - started).total_seconds() / 60

    text = table(cells)
    ratio_lines, holds = ratios(cells, args.concurrency)
    verdict = (
        ("holds" if holds else "fails") + ": inferd (2 workers, dynamic batching) >= 2x "
        "the better MLServer and LitServe variant at every concurrency"
    )
    print("\n" + text + "\n\n" + "\n".join(ratio_lines) + f"\n\ngoal {verdict}")

    command = " ".join([".venv/bin/python bench/python_throughput.py", *sys.argv[1:]])
    meta = versions()
    report = [
        f"# Python model throughput {started.isoformat(timespec='seconds')}\n",
        f"Command: `{command}` ({minutes:.1f} min), {os.cpu_count()} CPUs. "
        f"Versions: {json.dumps(meta)}\n",
        f"Model (bench/servers/py_features.py) in-process: {model_cost[1]:.0f} us per row at "
        f"batch 1, {model_cost[32]:.0f} us per row at batch 32. wrk, 1 thread, JSON body "
        f"[1, 256] FP32, 1 s warm-up + {args.seconds} s per cell.\n",
        text,
        "",
        "Ratios (same run):",
        "",
        *[f"- {line}" for line in ratio_lines],
        "",
        f"Goal (Python models: throughput >= 2x MLServer's parallel workers and LitServe's worker "
        f"queues): **{verdict}**.",
        "",
    ]
    if args.profile:
        print(f"\n== py-spy, inferd batching, c={args.profile}", flush=True)
        summary = profile_inferd(args.profile, max(args.seconds, 5), body)
        print(summary)
        report += ["## py-spy (inferd, batching on)", "", "```", summary, "```", ""]
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{started.strftime('%Y-%m-%d-%H%M')}-python.md"
    out.write_text("\n".join(report))
    (out.with_suffix(".json")).write_text(
        json.dumps(
            {
                "command": command,
                "versions": meta,
                "model_us_per_row": model_cost,
                "cells": [c.__dict__ for c in cells],
            },
            indent=1,
        )
    )
    print(f"written {out} and .json")


if __name__ == "__main__":
    main()
