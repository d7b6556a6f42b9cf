"""inferd benchmarks: raw ONNX Runtime vs inferd vs MLServer vs LitServe, in one run.

    .venv/bin/python bench/run.py [--quick | --smoke] [--only mlp|wide|minilm ...] [--skip-others]

Run it from the repository root with the project's venv (inferd installed). It builds the models
(bench/models.py) and the MLServer / LitServe virtualenvs (bench/envs.py) if they are missing,
then for each model measures, one after the other on this machine:

1. raw ONNX Runtime in-process ("the limit"): batch-1 latency with one session of 1 and of 2
   intra-op threads, and throughput for batch sizes 1..64 over three layouts: 1 session x 1
   thread, 1 session x 2 threads, 2 sessions x 1 thread driven by 2 Python threads, each point
   the best of several windows and cross-checked by a plain loop in a fresh process
   (bench/raw_ort.py);
2. for the small MLP, a canned-response server (bench/servers/canned.py): inferd's HTTP and
   gRPC stacks answering precomputed bytes, the network stacks' own minimum, which inferd's
   figures are then divided by;
   inferd (`inferd serve`) with batching off, on, and its defaults, driven by perf_analyzer over
   HTTP JSON, HTTP binary and gRPC;
3. MLServer (custom onnxruntime runtime) and LitServe (onnxruntime LitAPI), adaptive batching off
   and on, each in its own venv (perf_analyzer cannot drive MLServer: it needs Triton's model
   configuration endpoint, which MLServer does not have);
4. every server driven by wrk with the same v2 JSON body (one generator for all).

at concurrency 1, 8 and 32. It prints the tables and writes bench/results/<date>.md and .json.
The full run takes about 25-30 minutes; --quick about 10 (shorter windows, concurrency 1 and 32,
fewer batch sizes); a first run adds about 4 minutes to build the models and virtualenvs.
Figures are only comparable within one run: the load generator shares the two cores with the
server, as it would on any one-box deployment. Other processes on the machine are not: before
each measurement the run waits (within a budget) until they leave the CPUs, and every figure
records the cores they took during it (bench/cpu_share.py); a disturbed figure says so.

--smoke is the check that CI runs: it builds the models like any run, then measures every cell
at concurrency 1 for about a second (about 2 minutes in all), MLServer and LitServe only if
their virtualenvs were built before (`python bench/envs.py mlserver litserve`), and a load
generator that is not installed only gets a note. It writes nothing to bench/results/ (its
tables go to bench/.work/run/) and exits non-zero if a cell failed. Its figures prove that the
benchmark runs, not how fast.

Load generators: perf_analyzer ($PERF_ANALYZER or $INFERD_PERF_ANALYZER, else
~/.cache/perf_analyzer/perf_analyzer, where scripts/get-perf-analyzer.sh puts it) and
wrk (`apt-get install wrk`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import cpu_share  # noqa: E402
import envs  # noqa: E402
import models as bench_models  # noqa: E402
import raw_ort  # noqa: E402
import report  # noqa: E402
from generators import (  # noqa: E402
    PERF_ANALYZER,
    missing_generators,
    perf_analyzer,
    process,
    wrk,
)
from report import limits  # noqa: E402

WORK = BENCH / ".work"
RESULTS = BENCH / "results"
LOCAL = "127.0.0.1"

# MLServer and LitServe: adaptive batching "on" uses the same bound and delay as inferd's.
MAX_BATCH = bench_models.MAX_BATCH
DELAY_S = bench_models.QUEUE_DELAY_US / 1e6


@dataclass
class Profile:
    concurrency: list[int]
    batch_sizes: list[int]
    raw_seconds: float  # per raw ORT throughput window
    raw_repeats: int  # windows per raw ORT throughput point (the best is kept)
    latency_calls: int  # raw ORT batch-1 latency samples
    pa_window_ms: int
    pa_trials: int
    wrk_seconds: int
    quiet_budget_s: float  # in all, waiting for other processes to leave the CPUs before cells


FULL = Profile([1, 8, 32], [1, 2, 4, 8, 16, 32, 64], 1.0, 3, 2000, 2000, 6, 5, 300)
QUICK = Profile([1, 32], [1, 8, 32, 64], 0.5, 3, 500, 1000, 4, 2, 120)
SMOKE = Profile([1], [1, 8], 0.2, 1, 100, 500, 3, 1, 0)

# the canned-response server (the network stacks' minimum) answers for these models
CANNED_MODELS = frozenset({"mlp"})

PA_CLIENTS = {  # client name -> (perf_analyzer protocol, tensor format, which port)
    "perf_analyzer/http-json": ("http", "json", "http"),
    "perf_analyzer/http-binary": ("http", "binary", "http"),
    "perf_analyzer/grpc": ("grpc", "binary", "grpc"),
}


@dataclass
class Cell:
    model: str
    server: str  # onnxruntime | canned | inferd | mlserver | litserve
    batching: str  # off | on | defaults | layout name for raw ORT
    client: str  # perf_analyzer/http-json | perf_analyzer/http-binary | perf_analyzer/grpc | wrk
    concurrency: int
    throughput: float | None = None  # inferences / s
    p50_us: float | None = None
    p99_us: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# -- inputs -------------------------------------------------------------------------------------


V2_TYPES = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64"}


def v2_json_body(inputs: dict[str, np.ndarray]) -> str:
    return json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": list(a.shape),
                    "datatype": V2_TYPES[a.dtype],
                    "data": a.ravel().tolist(),
                }
                for name, a in inputs.items()
            ]
        },
        separators=(",", ":"),
    )


def perf_analyzer_data(inputs: dict[str, np.ndarray], path: Path) -> Path:
    """perf_analyzer --input-data file: the same tensors, shapes without the batch dim."""
    entry = {
        name: {"content": a.ravel().tolist(), "shape": list(a.shape[1:])}
        for name, a in inputs.items()
    }
    path.write_text(json.dumps({"data": [entry]}))
    return path


# -- raw ONNX Runtime ---------------------------------------------------------------------------


def raw_onnxruntime(
    model: str, prof: Profile, scratch: Path, gate: cpu_share.QuietGate | None = None
) -> list[Cell]:
    """Batch-1 latency (1 and 2 intra-op threads) and the throughput grid, each throughput
    point measured in-process and cross-checked in a fresh process (bench/raw_ort.py)."""
    gate = gate or cpu_share.QuietGate(0.0)
    path = bench_models.model_path(model)
    inputs = bench_models.model_inputs(model)
    inputs_npz = scratch / f"{model}-inputs.npz"
    np.savez(inputs_npz, **inputs)
    cells: list[Cell] = []
    for threads in (1, 2):
        budget = max(2.0, prof.raw_seconds * 3)
        lat = raw_ort.latency(path, inputs, threads, prof.latency_calls, budget)
        cells.append(
            Cell(
                model,
                "onnxruntime",
                f"1 session x {threads} thread",
                "in-process",
                1,
                1e6 / lat["mean_us"],
                lat["p50_us"],
                lat["p99_us"],
                extra={"kind": "latency", **lat},
            )
        )
    for layout, (sessions, threads) in raw_ort.LAYOUTS.items():
        points, checks, checked = raw_ort.measure_layout(
            path,
            inputs,
            inputs_npz,
            layout,
            prof.batch_sizes,
            prof.raw_seconds,
            prof.raw_repeats,
            gate,
        )
        for point in points:
            check = checks.get(point.batch)
            cell = Cell(
                model,
                "onnxruntime",
                f"{sessions} session x {threads} thread",
                "in-process",
                sessions,
                point.throughput,
                note=raw_ort.note(point, check),
                extra={"kind": "throughput", **asdict(point)},
            )
            if check is not None:
                cell.extra["check"] = asdict(check)
            elif isinstance(checked, str):
                cell.note = f"cross-check failed: {checked}"
            cells.append(cell)
            print(
                f"  onnxruntime {layout} batch {point.batch:<3} grid {point.throughput:9.1f}/s "
                f"(windows {point.windows}, others {point.others_cores or 0:.2f} cores)  "
                + (
                    f"cross-check {check.throughput:9.1f}/s (others {check.others_cores or 0:.2f})"
                    if check is not None
                    else "no cross-check"
                )
                + (f"  ! {cell.note}" if cell.note else ""),
                flush=True,
            )
    return cells


# -- servers ------------------------------------------------------------------------------------


def _stats(http: str, model: str) -> tuple[int, int]:
    try:
        with urllib.request.urlopen(f"http://{http}/v2/models/{model}/stats", timeout=5) as r:
            entry = json.load(r)["model_stats"][0]
        return int(entry["inference_count"]), int(entry["execution_count"])
    except Exception:
        return 0, 0


def bench_inferd(
    model: str,
    prof: Profile,
    scratch: Path,
    data: Path,
    body: Path,
    skip: frozenset[str] = frozenset(),
    gate: cpu_share.QuietGate | None = None,
) -> list[Cell]:
    """inferd with batching off, on and its defaults; ``skip`` names load generators to leave out
    (``perf_analyzer``, ``wrk``)."""
    cells: list[Cell] = []
    inferd = Path(sys.executable).parent / "inferd"
    for variant in ("off", "on", "defaults"):
        ready_file = scratch / "inferd-ready.json"
        ready_file.unlink(missing_ok=True)
        repo = bench_models.repo_dir(model, variant)
        cmd = [
            str(inferd),
            "serve",
            "--model-repository",
            str(repo),
            "--http-port",
            "18000",
            "--grpc-port",
            "18001",
            "--metrics-port",
            "18002",
        ]
        log = scratch / f"inferd-{model}-{variant}.log"
        with process(cmd, f"http://{LOCAL}:18000/v2/models/{model}/ready", log) as proc:
            ports = (proc.pid, 18000, 18001)
            cells += _drive(model, "inferd", variant, ports, prof, scratch, data, body, skip, gate)
    return cells


def bench_canned(
    model: str,
    prof: Profile,
    scratch: Path,
    data: Path,
    body: Path,
    skip: frozenset[str] = frozenset(),
    gate: cpu_share.QuietGate | None = None,
) -> list[Cell]:
    """The canned-response server (bench/servers/canned.py): inferd's HTTP and gRPC stacks with
    precomputed replies, the network stacks' own minimum; the same clients as inferd."""
    model_dir = bench_models.repo_dir(model, "off") / model
    cmd = [sys.executable, str(BENCH / "servers" / "canned.py"), str(model_dir)]
    cmd += ["--host", LOCAL, "--http-port", "18300", "--grpc-port", "18301"]
    log = scratch / f"canned-{model}.log"
    with process(cmd, f"http://{LOCAL}:18300/v2/models/{model}/ready", log) as proc:
        ports = (proc.pid, 18300, 18301)
        return _drive(model, "canned", "canned", ports, prof, scratch, data, body, skip, gate)


def _drive(
    model: str,
    server: str,
    variant: str,
    ports: tuple[int, int, int],
    prof: Profile,
    scratch: Path,
    data: Path,
    body: Path,
    skip: frozenset[str],
    gate: cpu_share.QuietGate | None,
) -> list[Cell]:
    """Every client at every concurrency against one running server; ``ports`` is the server's
    process group (its pid: it leads its own session), HTTP port and gRPC port. Each cell
    records the CPU that processes other than the server and the load generator took."""
    cells: list[Cell] = []
    group, http_port, grpc_port = ports
    http, grpc = f"{LOCAL}:{http_port}", f"{LOCAL}:{grpc_port}"
    runs: list[tuple[str, int, Callable[[], dict[str, Any]]]] = []
    if "perf_analyzer" not in skip:
        for client, (protocol, fmt, port) in PA_CLIENTS.items():
            url = http if port == "http" else grpc
            for c in prof.concurrency:
                pa = partial(
                    perf_analyzer,
                    model,
                    url,
                    protocol,
                    fmt,
                    c,
                    data,
                    prof.pa_window_ms,
                    prof.pa_trials,
                    scratch,
                )
                runs.append((client, c, pa))
    if "wrk" not in skip:
        url = f"http://{http}/v2/models/{model}/infer"
        for c in prof.concurrency:
            runs.append(("wrk/http-json", c, partial(wrk, url, body, c, prof.wrk_seconds, scratch)))
    for client, c, measure in runs:
        waited = gate.wait() if gate is not None else 0.0
        before = _stats(http, model)
        with cpu_share.watch(frozenset({group})) as share:
            result = measure()
        after = _stats(http, model)
        cell = _cell(model, server, variant, client, c, result, before, after, share)
        if waited:
            cell.extra["waited_for_quiet_s"] = round(waited, 1)
        cells.append(cell)
    return cells


def _cell(
    model: str,
    server: str,
    batching: str,
    client: str,
    c: int,
    result: dict[str, Any],
    before: tuple[int, int] = (0, 0),
    after: tuple[int, int] = (0, 0),
    share: cpu_share.Share | None = None,
) -> Cell:
    cell = Cell(model, server, batching, client, c)
    if "error" in result:
        cell.note = "failed: " + result["error"]
    else:
        cell.throughput, cell.p50_us, cell.p99_us = (
            result["throughput"],
            result["p50_us"],
            result["p99_us"],
        )
        cell.note = result.get("note", "")
        cell.extra = {
            k: v for k, v in result.items() if k not in {"throughput", "p50_us", "p99_us", "note"}
        }
    # other work on the machine skews every figure: keep the 1-minute load average with each cell
    cell.extra["load1"] = round(os.getloadavg()[0], 2)
    if share is not None and share.others_cores is not None:
        cell.extra["others_cores"] = round(share.others_cores, 2)
        if share.others_cores > raw_ort.QUIET_CORES:
            busiest = f" ({', '.join(share.busiest)})" if share.busiest else ""
            disturbed = f"other processes took {share.others_cores:.2f} cores{busiest}"
            cell.note = f"{cell.note}; {disturbed}" if cell.note else disturbed
    executions = after[1] - before[1]
    if executions > 0:
        cell.extra["avg_batch"] = round((after[0] - before[0]) / executions, 2)
    print(f"  {server:8} {batching:8} {client:26} c={c:<3} " + _fmt_result(cell), flush=True)
    return cell


def _fmt_result(cell: Cell) -> str:
    if cell.throughput is None:
        return cell.note
    text = (
        f"{cell.throughput:9.1f}/s p50 {cell.p50_us / 1e3:7.2f} ms p99 {cell.p99_us / 1e3:7.2f} ms"
    )
    if "avg_batch" in cell.extra:
        text += f" batch {cell.extra['avg_batch']}"
    return text + (f" ({cell.note})" if cell.note else "")


def bench_mlserver(model: str, prof: Profile, scratch: Path, data: Path, body: Path) -> list[Cell]:
    py = envs.ensure("mlserver")
    cells: list[Cell] = []
    for variant in ("off", "on"):
        root = scratch / f"mlserver-{model}-{variant}"
        (root / model).mkdir(parents=True, exist_ok=True)
        (root / "settings.json").write_text(
            json.dumps(
                {
                    "http_port": 18100,
                    "grpc_port": 18101,
                    "metrics_port": 18102,
                    "host": LOCAL,
                }
            )
        )
        settings: dict[str, Any] = {
            "name": model,
            "implementation": "mlserver_onnx.OnnxModel",
            "parameters": {"uri": str(bench_models.model_path(model))},
        }
        if variant == "on":
            settings |= {"max_batch_size": MAX_BATCH, "max_batch_time": DELAY_S}
        (root / model / "model-settings.json").write_text(json.dumps(settings))
        env = dict(os.environ, PYTHONPATH=str(BENCH / "servers"))
        cmd = [str(py.parent / "mlserver"), "start", str(root)]
        log = scratch / f"mlserver-{model}-{variant}.log"
        with process(cmd, f"http://{LOCAL}:18100/v2/models/{model}/ready", log, env=env):
            # perf_analyzer cannot drive MLServer: it first reads the model configuration
            # (Triton's /v2/models/<m>/config and gRPC ModelConfig), which MLServer lacks.
            for c in prof.concurrency:
                result = wrk(
                    f"http://{LOCAL}:18100/v2/models/{model}/infer",
                    body,
                    c,
                    prof.wrk_seconds,
                    scratch,
                )
                cells.append(_cell(model, "mlserver", variant, "wrk/http-json", c, result))
    return cells


def bench_litserve(model: str, prof: Profile, scratch: Path, body: Path) -> list[Cell]:
    py = envs.ensure("litserve")
    cells: list[Cell] = []
    for variant in ("off", "on"):
        batch, delay = (MAX_BATCH, DELAY_S) if variant == "on" else (1, 0.0)
        cmd = [
            str(py),
            str(BENCH / "servers" / "litserve_onnx.py"),
            str(bench_models.model_path(model)),
            "18200",
            str(batch),
            str(delay),
        ]
        log = scratch / f"litserve-{model}-{variant}.log"
        with process(cmd, f"http://{LOCAL}:18200/health", log):
            for c in prof.concurrency:
                result = wrk(f"http://{LOCAL}:18200/predict", body, c, prof.wrk_seconds, scratch)
                cells.append(_cell(model, "litserve", variant, "wrk/http-json", c, result))
    return cells


def versions() -> dict[str, str]:
    import onnxruntime

    found = envs.versions(
        {
            "project": ["inferd", "uvicorn", "grpcio"],
            "mlserver": ["mlserver", "onnxruntime"],
            "litserve": ["litserve", "onnxruntime"],
        }
    )
    found["onnxruntime (raw, inferd)"] = onnxruntime.__version__
    found["perf_analyzer"] = str(PERF_ANALYZER)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description="inferd benchmarks (see the module docstring)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="about 10 minutes instead of 30")
    mode.add_argument(
        "--smoke",
        action="store_true",
        help="CI's check that the benchmark runs: about a second per cell, results not kept",
    )
    parser.add_argument("--only", action="append", choices=["mlp", "wide", "minilm"])
    parser.add_argument(
        "--skip-others",
        action="store_true",
        help="raw ORT and inferd only (no MLServer / LitServe)",
    )
    args = parser.parse_args()
    prof = SMOKE if args.smoke else QUICK if args.quick else FULL
    # before each measurement, wait (within the profile's budget) for other processes to go quiet
    gate = cpu_share.QuietGate(prof.quiet_budget_s)
    model_names = args.only or ["mlp", "wide", "minilm"]

    missing = missing_generators()
    for name, why in missing.items():
        print(f"{name}: {why}", flush=True)
    if missing and not args.smoke:
        sys.exit("install the load generators above first (or try --smoke, which skips them)")
    if missing.keys() >= {"perf_analyzer", "wrk"}:
        sys.exit("no load generator to drive the servers with")
    # --smoke never builds the peer servers' virtualenvs (minutes of installs); it measures
    # the ones that exist
    others = [] if args.skip_others else ["mlserver", "litserve"]
    if args.smoke:
        for name in [n for n in others if not envs.ready(n)]:
            print(f"{name}: skipped, its virtualenv is not built (python bench/envs.py {name})")
            others.remove(name)
    if "wrk" in missing:
        others = []  # MLServer and LitServe are driven by wrk only

    bench_models.build(model_names)
    for name in others:
        envs.ensure(name)

    started = dt.datetime.now()
    cells: list[Cell] = []
    scratch = WORK / "run"  # logs and inputs of the last run, kept for inspection
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    for model in model_names:
        print(f"== {model}", flush=True)
        inputs = bench_models.model_inputs(model)
        data = perf_analyzer_data(inputs, scratch / f"{model}-data.json")
        body = scratch / f"{model}-body.json"
        body.write_text(v2_json_body(inputs))
        raw = raw_onnxruntime(model, prof, scratch, gate)
        cells += raw
        lim = limits(raw, model)
        print(
            f"  onnxruntime batch-1 p50 {report.ms(lim['p50_us'])} ms ({lim['latency_layout']}), "
            f"best {lim['throughput']:.1f}/s ({lim['throughput_layout']}, batch "
            f"{lim['throughput_batch']})",
            flush=True,
        )
        if model in CANNED_MODELS:
            cells += bench_canned(model, prof, scratch, data, body, frozenset(missing), gate)
        cells += bench_inferd(model, prof, scratch, data, body, frozenset(missing), gate)
        # the comparison models; the wide MLP only measures inferd's batching
        if model != "wide":
            if "mlserver" in others:
                cells += bench_mlserver(model, prof, scratch, data, body)
            if "litserve" in others:
                cells += bench_litserve(model, prof, scratch, body)
    minutes = (dt.datetime.now() - started).total_seconds() / 60
    suffix = "-smoke" if args.smoke else "-quick" if args.quick else ""
    stamp = started.strftime("%Y-%m-%d-%H%M") + suffix
    # a smoke run's figures are not results: they stay with the run's logs
    target = scratch if args.smoke else RESULTS
    target.mkdir(exist_ok=True)
    text = report.tables(cells, model_names)
    meta = {
        "started": started.isoformat(timespec="seconds"),
        "minutes": round(minutes, 1),
        "profile": asdict(prof),
        "command": " ".join(["python", "bench/run.py", *sys.argv[1:]]),
        "versions": versions(),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}",
        "skipped": missing,
        "waited_for_quiet_s": round(prof.quiet_budget_s - gate.budget_s, 1),
    }
    header = (
        f"# inferd benchmark {meta['started']}\n\nCommand: `{meta['command']}` "
        f"({meta['minutes']} min). Versions: {json.dumps(meta['versions'])}\n\n"
    )
    (target / f"{stamp}.md").write_text(header + text + "\n")
    (target / f"{stamp}.json").write_text(
        json.dumps(
            {
                "meta": meta,
                "limits": {m: limits(cells, m) for m in model_names},
                "cells": [asdict(c) for c in cells],
            },
            indent=1,
        )
    )
    print("\n" + text)
    print(f"written {target / (stamp + '.md')} and .json ({minutes:.1f} min)")
    failed = [c for c in cells if c.throughput is None]
    if args.smoke and failed:
        for c in failed:
            print(f"failed: {c.model} {c.server} {c.batching} {c.client}: {c.note}")
        sys.exit(f"{len(failed)} benchmark cells failed (logs in {scratch})")


if __name__ == "__main__":
    main()
