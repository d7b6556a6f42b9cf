"""Many models, one memory budget: on-demand loading with LRU eviction under Zipf traffic.

Builds ``--models`` small ONNX models in a temporary repository (each ``Y = X + table[I]`` with
a ``--table-mib`` MiB weight table), then runs two ``inferd serve --model-control-mode
on-demand`` servers:

1. **sizes**: a budget of all the machine's memory; every model is requested once, then the
   server's resident set (its process tree) is read: what serving all of them costs;
2. **budget**: the baseline plus room for ``--share`` of the models (sizes as the first server
   measured them); ``--clients`` clients send Zipf(``--zipf``)-distributed requests over the
   models for ``--duration-s`` seconds;
3. **all loaded**: the same traffic on a server that loaded every model at start.

It prints failed requests, the hit ratio (requests that found their model loaded), request
latency p50/p99 and throughput beside the all-loaded server's, the server's resident set p99
(sampled every 100 ms) beside the all-loaded figure, evictions and cold-load latency p50/p99
(from the server's log).

    .venv/bin/python bench/many_models.py [--models 100] [--share 0.2] [--clients 16]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from inferd.repository.memory import process_tree_rss
from inferd.testing import ServerProcess, running_server

CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {{ name: "X" data_type: TYPE_FP32 dims: [ 1, 16 ] }},
  {{ name: "I" data_type: TYPE_INT64 dims: [ 1 ] }}
]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1, 16 ] }} ]
"""


def build(repo: Path, count: int, table_mib: float) -> list[str]:
    rows = int(table_mib * (1 << 20) / 64)
    names = []
    for k in range(count):
        name = f"m{k:03d}"
        table = numpy_helper.from_array(np.full((rows, 16), k, np.float32), "table")
        graph = helper.make_graph(
            [
                helper.make_node("Gather", ["table", "I"], ["row"], axis=0),
                helper.make_node("Add", ["X", "row"], ["Y"]),
            ],
            "table",
            [
                helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", 1, 16]),
                helper.make_tensor_value_info("I", TensorProto.INT64, ["b", 1]),
            ],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b", 1, 16])],
            initializer=[table],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.onnx").write_bytes(model.SerializeToString())
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        names.append(name)
    return names


def inputs() -> list[Any]:
    x = httpclient.InferInput("X", [1, 1, 16], "FP32")
    x.set_data_from_numpy(np.zeros((1, 1, 16), np.float32))
    i = httpclient.InferInput("I", [1, 1], "INT64")
    i.set_data_from_numpy(np.zeros((1, 1), np.int64))
    return [x, i]


def metric(server: ServerProcess, name: str) -> float:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    total = 0.0
    for match in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE):
        total += float(match.group(1))
    return total


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def drive(
    server: ServerProcess, names: list[str], args: argparse.Namespace
) -> tuple[list[float], list[str], list[int]]:
    """Zipf traffic from ``args.clients`` closed-loop clients for ``args.duration_s``:
    latencies of answered requests, failures, the server's resident set every 100 ms."""
    weights = 1.0 / np.arange(1, args.models + 1) ** args.zipf
    weights /= weights.sum()
    latencies: list[float] = []
    failures: list[str] = []
    rss: list[int] = []
    lock = threading.Lock()
    stop = time.monotonic() + args.duration_s

    def client_loop(seed: int) -> None:
        rng = np.random.default_rng(seed)
        with httpclient.InferenceServerClient(server.http_url, network_timeout=120) as client:
            while time.monotonic() < stop:
                name = names[int(rng.choice(args.models, p=weights))]
                started = time.perf_counter()
                try:
                    client.infer(name, inputs())
                except Exception as exc:  # counted, the run goes on
                    with lock:
                        failures.append(f"{name}: {exc}")
                    continue
                with lock:
                    latencies.append(time.perf_counter() - started)

    threads = [
        threading.Thread(target=client_loop, args=(args.seed + k,)) for k in range(args.clients)
    ]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        rss.append(process_tree_rss(server.pid))
        time.sleep(0.1)
    for t in threads:
        t.join()
    return latencies, failures, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=100)
    ap.add_argument("--table-mib", type=float, default=4.0)
    ap.add_argument("--share", type=float, default=0.2, help="share of the models the budget holds")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--duration-s", type=float, default=30.0)
    ap.add_argument("--min-residency-s", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="inferd-many-models-") as tmp:
        repo = Path(tmp)
        names = build(repo, args.models, args.table_mib)
        on_demand = ["--model-control-mode", "on-demand", "--log-verbose", "0"]

        # 1. every model loaded: sizes, baseline, resident set
        with running_server([repo], [*on_demand, "--model-memory-budget", "100%"]) as server:
            with httpclient.InferenceServerClient(server.http_url) as client:
                for name in names:
                    client.infer(name, inputs())
                index = {e["name"]: e for e in client.get_model_repository_index()}
            baseline = int(metric(server, "inferd_model_memory_baseline_bytes"))
            all_loaded_rss = process_tree_rss(server.pid)
        sizes = sorted(int(index[n]["memory_bytes"]) for n in names)
        held = max(1, int(args.models * args.share))
        budget = baseline + int(np.median(sizes)) * held

        # 2. Zipf traffic within the budget
        flags = [
            *on_demand,
            "--model-memory-budget",
            str(budget),
            "--model-min-residency-secs",
            str(args.min_residency_s),
        ]
        with running_server([repo], flags) as server:
            latencies, failures, rss = drive(server, names, args)
            loads = metric(server, "inferd_model_loads_total")
            evictions = metric(server, "inferd_model_evictions_total")
            thrash = metric(server, "inferd_model_eviction_thrash_total")
            cold = [
                float(m.group(1))
                for m in re.finditer(r"loaded on demand in ([0-9.]+) s", server.log())
            ]
        # 3. the same traffic with every model loaded (no budget), for comparison
        with running_server([repo], [*on_demand, "--load-model", "*"]) as server:
            all_latencies, all_failures, _ = drive(server, names, args)

    requests = len(latencies) + len(failures)
    mib = 1 << 20
    print(
        f"models: {args.models} x {args.table_mib:g} MiB tables; measured size median "
        f"{np.median(sizes) / mib:.1f} MiB; server baseline {baseline / mib:.0f} MiB"
    )
    print(
        f"budget: {budget / mib:.0f} MiB (baseline + {held} models); clients {args.clients}, "
        f"Zipf({args.zipf}), {args.duration_s:g} s, min residency {args.min_residency_s:g} s"
    )
    print(
        f"requests: {requests}, failed: {len(failures)}, "
        f"throughput {requests / args.duration_s:.0f}/s"
    )
    print(
        f"hit ratio: {1 - loads / max(1, requests):.3f} ({int(loads)} loads, "
        f"{int(evictions)} evictions, {int(thrash)} residency refusals)"
    )
    print(f"latency p50 {pct(latencies, 50) * 1e3:.1f} ms, p99 {pct(latencies, 99) * 1e3:.1f} ms")
    done = len(all_latencies)
    print(
        f"all loaded, same traffic: {done / args.duration_s:.0f}/s "
        f"({len(all_failures)} failed), latency p50 {pct(all_latencies, 50) * 1e3:.1f} ms, "
        f"p99 {pct(all_latencies, 99) * 1e3:.1f} ms; budgeted/all-loaded throughput "
        f"{requests / max(1, done):.2f}x"
    )
    print(
        f"cold load p50 {pct(cold, 50) * 1e3:.1f} ms, p99 {pct(cold, 99) * 1e3:.1f} ms "
        f"({len(cold)} loads)"
    )
    p99_rss = pct([float(r) for r in rss], 99)
    print(
        f"resident set p99 {p99_rss / mib:.0f} MiB vs all {args.models} loaded "
        f"{all_loaded_rss / mib:.0f} MiB ({p99_rss / all_loaded_rss:.2f}x)"
    )
    for line in failures[:5]:
        print("  failure:", line)


if __name__ == "__main__":
    main()
