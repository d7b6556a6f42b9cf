"""``inferd serve --frontends K``: throughput and server CPU per request, K=1 against K=2.

    .venv/bin/python bench/frontends.py [--concurrency 32] [--seconds 10] [--protocol http]
                                        [--frontends 1,2] [--rounds 3] [--trials 3]
                                        [--model mlp|identity] [--against DIR]

Starts a server on the small MLP (64 -> 256 -> 256 -> 10, dynamic batching on; or, with
``--model identity``, an identity of a 1 MiB tensor) for each K in turn, drives it with
``inferd perf`` at the given concurrency, and reads the CPU time of the whole server (the
engine process and every front-end process, from ``/proc``) around the measurement. It prints
requests per second, server CPU microseconds per request and the times a server thread went to
sleep per request (voluntary context switches: each a wake-up) for each K, and the ratios to the
first K, all measured in this one run (rounds alternate the Ks so a neighbour's load hits both
alike); figures are medians over the rounds, with the spread.

``--against DIR`` also runs every K on the source tree in DIR (another checkout, e.g. made with
``git worktree add /tmp/old HEAD``: its ``src`` goes first on ``PYTHONPATH``), alternating with
this one in every round, and prints the ratios of this tree to that one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
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
IDENTITY_ELEMENTS = 1 << 18  # 1 MiB of FP32 each way
IDENTITY_CONFIG = f"""
name: "identity"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {IDENTITY_ELEMENTS} ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ {IDENTITY_ELEMENTS} ] }} ]
"""
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


def _write_identity(path: Path) -> None:
    """An ONNX Identity of one 1 MiB FP32 tensor (tensor bytes are all there is to move)."""
    from onnx import TensorProto, helper

    shape = [IDENTITY_ELEMENTS]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "identity",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())


def _sleeps(pids: list[int]) -> int:
    """Voluntary context switches of every thread of ``pids``: how often they went to sleep
    (each one a wake-up later)."""
    total = 0
    for pid in pids:
        for status in Path(f"/proc/{pid}/task").glob("*/status"):
            with contextlib.suppress(OSError):
                for line in status.read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
    return total


def _served(url: str, model: str) -> int:
    with urllib.request.urlopen(f"http://{url}/v2/models/{model}/stats", timeout=10) as reply:
        stats = json.load(reply)
    return int(stats["model_stats"][0]["inference_count"])


def measure(
    repo: Path, frontends: int, args: argparse.Namespace, tree: Path | None = None
) -> dict[str, float]:
    env = None if tree is None else {"PYTHONPATH": str(tree / "src")}
    server = start_server([repo], ["--frontends", str(frontends)], env=env)
    try:
        url = server.http_url if args.protocol == "http" else server.grpc_url
        out = Path(tempfile.mkdtemp()) / "perf.json"
        cmd = [
            sys.executable,
            "-m",
            "inferd.cli.main",
            "perf",
            "-m",
            args.model,
            "-u",
            url,
            "-i",
            args.protocol,
            "--concurrency-range",
            str(args.concurrency),
            "-p",
            str(int(args.seconds * 1000)),
            "-r",
            str(args.trials),
            "--json-output",
            str(out),
        ]
        pids = _tree(server.pid)
        count0 = _served(server.http_url, args.model)
        cpu0, engine0, t0 = _cpu_s(pids), _cpu_s([server.pid]), time.monotonic()
        sleeps0 = _sleeps(pids)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        cpu1, engine1, t1 = _cpu_s(pids), _cpu_s([server.pid]), time.monotonic()
        sleeps1 = _sleeps(pids)
        # the server's own count (one place for every front end), warm-up included like the CPU
        requests = _served(server.http_url, args.model) - count0
        report = json.loads(out.read_text())
    finally:
        server.stop()
    throughput = float(report["points"][-1]["throughput"])
    return {
        "throughput": throughput,
        "cpu_us_per_request": 1e6 * (cpu1 - cpu0) / requests,
        "engine_us_per_request": 1e6 * (engine1 - engine0) / requests,
        "server_cores": (cpu1 - cpu0) / (t1 - t0),
        "sleeps_per_request": (sleeps1 - sleeps0) / requests,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--frontends", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--model",
        choices=("mlp", "identity"),
        default="mlp",
        help="mlp: the small MLP; identity: 1 MiB FP32 in and out, no batching",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=3,
        help="measurement windows at most per run (inferd perf -r); the CPU per request "
        "counts every window",
    )
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        help="another source tree to run every K on too, alternating with this one",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="inferd-frontends-bench-"))
    (work / args.model / "1").mkdir(parents=True)
    if args.model == "mlp":
        bench_models.build_mlp(bench_models.MLPS["mlp"], work / "mlp" / "1" / "model.onnx")
        (work / "mlp" / "config.pbtxt").write_text(CONFIG)
    else:
        _write_identity(work / "identity" / "1" / "model.onnx")
        (work / "identity" / "config.pbtxt").write_text(IDENTITY_CONFIG)
    counts = [int(k) for k in args.frontends.split(",")]
    trees: list[Path | None] = [None] if args.against is None else [args.against, None]
    cells = [(tree, k) for tree in trees for k in counts]
    results: dict[tuple[Path | None, int], list[dict[str, float]]] = {c: [] for c in cells}
    load_before = os.getloadavg()[0]
    for _ in range(args.rounds):
        for cell in cells:
            results[cell].append(measure(work, cell[1], args, cell[0]))
    print(
        f"{args.model}, {args.protocol}, concurrency {args.concurrency}, {args.seconds:.0f} s, "
        f"{os.cpu_count()} CPUs, {args.rounds} rounds (medians, min-max across rounds), "
        f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    keys = (
        "throughput",
        "cpu_us_per_request",
        "engine_us_per_request",
        "server_cores",
        "sleeps_per_request",
    )
    med = {c: {key: statistics.median([r[key] for r in results[c]]) for key in keys} for c in cells}
    for tree in trees:
        print("this tree" if tree is None else f"tree {tree}")
        base = med[(tree, counts[0])]
        for k in counts:
            r, runs = med[(tree, k)], results[(tree, k)]
            tput = [run["throughput"] for run in runs]
            cpu = [run["cpu_us_per_request"] for run in runs]
            print(
                f"  --frontends {k}: {r['throughput']:8.0f} infer/s "
                f"({min(tput):.0f}-{max(tput):.0f})  {r['cpu_us_per_request']:6.0f} µs server "
                f"CPU/request ({min(cpu):.0f}-{max(cpu):.0f}; "
                f"{r['engine_us_per_request']:.0f} in the engine process)  "
                f"{r['server_cores']:.2f} cores  {r['sleeps_per_request']:.2f} sleeps/request  "
                f"(x{r['throughput'] / base['throughput']:.2f} throughput, "
                f"x{r['cpu_us_per_request'] / base['cpu_us_per_request']:.2f} CPU/request "
                f"to K={counts[0]})"
            )
    if args.against is not None:
        print("this tree against the other, same K:")
        for k in counts:
            new, old = med[(None, k)], med[(args.against, k)]
            print(
                f"  --frontends {k}: x{new['throughput'] / old['throughput']:.2f} throughput, "
                f"x{new['cpu_us_per_request'] / old['cpu_us_per_request']:.2f} CPU/request, "
                f"x{new['engine_us_per_request'] / old['engine_us_per_request']:.2f} engine "
                f"CPU/request, x{new['sleeps_per_request'] / old['sleeps_per_request']:.2f} "
                "sleeps/request"
            )


if __name__ == "__main__":
    main()
