"""Runtime thread settings served for real: throughput, latency and server CPU per request.

    .venv/bin/python bench/ort_threads.py [--seconds 5] [--rounds 3] [--concurrency 1,32]
                                          [--variants mlp-spin,mlp-nospin,fraud,fraud-1t]
                                          [--against DIR]

Each variant is a model configuration served by ``inferd serve`` (one server per variant and
round) and driven by ``inferd perf`` at each concurrency in turn; the CPU time of the whole
server process tree is read from ``/proc`` around every measurement and divided by the requests
the server counted. Variants (the same model file, only the ``parameters`` differ):

- ``mlp-spin``: the small MLP (64 -> 256 -> 256 -> 10, dynamic batching), one CPU instance with
  every core, ``allow_spinning: 1`` (ONNX Runtime's own default, inferd's before it turned
  spinning off);
- ``mlp-nospin``: the same with ``allow_spinning: 0``;
- ``mlp-default``: the same with no thread parameter at all (inferd's default now);
- ``mlp-2i``: no ``instance_group`` (inferd's default: two instances, a solo session);
- ``fraud``: ``examples/models/fraud_xgboost`` (the ``fil`` backend, XGBoost through ONNX
  Runtime's tree operator, one instance with every core, no spinning);
- ``fraud-1t``: the same with ``thread_count: 1``.

Rounds alternate the variants, so a neighbour's load hits every variant alike; the figures are
medians over the rounds with the spread (min-max). ``--against DIR`` also runs every variant on
the source tree in DIR (another checkout, e.g. ``git worktree add /tmp/old HEAD``), alternating
with this one; a parameter the older tree does not know is ignored there (so ``mlp-default``
on it is the old default).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import models as bench_models  # noqa: E402
from frontends import _cpu_s, _tree  # noqa: E402 - the server's process tree and its CPU

from inferd.tools.serve_process import start_server  # noqa: E402

MLP = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [ {{ name: "input" data_type: TYPE_FP32 dims: [ 64 ] }} ]
output [ {{ name: "output" data_type: TYPE_FP32 dims: [ 10 ] }} ]
dynamic_batching {{ }}
{extra}
"""
ONE = "instance_group [ { kind: KIND_CPU count: 1 } ]\n"


def _param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


VARIANTS: dict[str, tuple[str, str]] = {  # name -> (model kind, extra config text)
    "mlp-spin": ("mlp", ONE + _param("allow_spinning", "1")),
    "mlp-nospin": ("mlp", ONE + _param("allow_spinning", "0")),
    "mlp-default": ("mlp", ONE),
    "mlp-2i": ("mlp", ""),
    "fraud": ("fraud", ""),
    "fraud-1t": ("fraud", _param("thread_count", "1")),
}


def write_repository(root: Path, names: list[str]) -> None:
    mlp_file = root / "_mlp.onnx"
    bench_models.build_mlp(bench_models.MLPS["mlp"], mlp_file)
    fraud = ROOT / "examples" / "models" / "fraud_xgboost"
    for name in names:
        kind, extra = VARIANTS[name]
        folder = root / name
        (folder / "1").mkdir(parents=True)
        if kind == "mlp":
            shutil.copy(mlp_file, folder / "1" / "model.onnx")
            (folder / "config.pbtxt").write_text(MLP.format(name=name, extra=extra))
        else:
            shutil.copy(fraud / "1" / "xgboost.json", folder / "1" / "xgboost.json")
            config = (fraud / "config.pbtxt").read_text().replace("fraud_xgboost", name)
            if extra:  # the example's parameters list gains one entry
                key = extra.split('"')[1]
                value = extra.split('"')[3]
                config = config.replace(
                    "parameters [\n",
                    f'parameters [\n  {{ key: "{key}" value: {{ string_value: "{value}" }} }},\n',
                )
            (folder / "config.pbtxt").write_text(f'name: "{name}"\n' + _strip_name(config))


def _strip_name(config: str) -> str:
    return "\n".join(line for line in config.splitlines() if not line.startswith("name:"))


def _served(url: str, model: str) -> int:
    with urllib.request.urlopen(f"http://{url}/v2/models/{model}/stats", timeout=10) as reply:
        stats = json.load(reply)
    return int(stats["model_stats"][0]["inference_count"])


def measure(
    repo: Path, name: str, args: argparse.Namespace, tree: Path | None
) -> dict[int, dict[str, float]]:
    """One server serving only ``name``; one ``inferd perf`` run per concurrency."""
    env = None if tree is None else {"PYTHONPATH": str(tree / "src")}
    server_args = ["--model-control-mode", "explicit", "--load-model", name]
    server = start_server([repo], server_args, env=env)
    found: dict[int, dict[str, float]] = {}
    try:
        pids = _tree(server.pid)
        for concurrency in args.concurrency:
            out = Path(tempfile.mkdtemp()) / "perf.json"
            cmd = [
                *(sys.executable, "-m", "inferd.cli.main", "perf", "-m", name),
                *("-u", server.http_url, "--concurrency-range", str(concurrency)),
                *("-p", str(int(args.seconds * 1000)), "--json-output", str(out)),
            ]
            count0 = _served(server.http_url, name)
            cpu0, t0 = _cpu_s(pids), time.monotonic()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            cpu1, t1 = _cpu_s(pids), time.monotonic()
            requests = _served(server.http_url, name) - count0
            point = json.loads(out.read_text())["points"][-1]
            found[concurrency] = {
                "throughput": float(point["throughput"]),
                "p50_us": float(point["percentiles_us"]["50"]),
                "p99_us": float(point["percentiles_us"]["99"]),
                "cpu_us_per_request": 1e6 * (cpu1 - cpu0) / max(1, requests),
                "server_cores": (cpu1 - cpu0) / (t1 - t0),
            }
    finally:
        server.stop()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--variants", default="mlp-spin,mlp-nospin,fraud,fraud-1t")
    parser.add_argument("--against", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write every round here")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    names = args.variants.split(",")
    repo = Path(tempfile.mkdtemp(prefix="inferd-ort-threads-"))
    write_repository(repo, names)
    trees: list[Path | None] = [None] if args.against is None else [args.against, None]
    cells = [(tree, name) for name in names for tree in trees]
    runs: dict[tuple[Path | None, str], list[dict[int, dict[str, float]]]] = {c: [] for c in cells}
    for round_ in range(args.rounds):
        order = cells if round_ % 2 == 0 else cells[::-1]
        for cell in order:
            runs[cell].append(measure(repo, cell[1], args, cell[0]))
            got = ", ".join(
                f"c={c} {r['throughput']:.0f}/s {r['cpu_us_per_request']:.0f} µs CPU/request"
                for c, r in runs[cell][-1].items()
            )
            where = "" if cell[0] is None else f" [{cell[0]}]"
            print(f"round {round_ + 1}: {cell[1]}{where}: {got}", file=sys.stderr, flush=True)
    print(
        f"{os.cpu_count()} CPUs (affinity {len(os.sched_getaffinity(0))}), {args.seconds:.0f} s "
        f"per point, {args.rounds} rounds: medians (min-max across rounds)"
    )
    keys = ("throughput", "p50_us", "p99_us", "cpu_us_per_request", "server_cores")
    table: list[dict[str, Any]] = []
    for tree, name in cells:
        for c in args.concurrency:
            row: dict[str, Any] = {"tree": str(tree or "this"), "variant": name, "c": c}
            cells_text = []
            for key in keys:
                values = [run[c][key] for run in runs[(tree, name)]]
                row[key] = statistics.median(values)
                row[key + "_all"] = values
                cells_text.append(
                    f"{key} {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
                    if key == "server_cores"
                    else f"{key} {statistics.median(values):.0f} "
                    f"({min(values):.0f}-{max(values):.0f})"
                )
            table.append(row)
            where = "" if tree is None else f" [{tree}]"
            print(f"{name}{where} c={c}: " + ", ".join(cells_text))
    if args.json is not None:
        args.json.write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
