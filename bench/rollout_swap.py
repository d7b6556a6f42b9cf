"""What a version swap costs the requests in flight: failures and p99 latency while a new version
found by polling takes over, and while an explicit load reloads the model with a changed config,
against the steady p99 of the same run; and what keeping the recent requests costs a request.

    flock /tmp/bench.lock .venv/bin/python bench/rollout_swap.py [--concurrency 32]
        [--steady-s 8] [--swaps 4] [--after-s 3] [--warmup-from-recent 8 0]

For each ``--warmup-from-recent`` value it starts ``inferd serve`` twice on a model built here
(an FP32 MLP 256 -> 1024 -> 1024 -> 16, ``max_batch_size 8``, two instances: about half a
millisecond per request on one core), and drives it with ``--concurrency`` asyncio tritonclient
HTTP clients, each on its own connection, every request naming no version:

- poll: ``--model-control-mode poll --repository-poll-secs 0.5``; after ``--steady-s`` seconds a
  new version folder is moved into the model, ``--swaps`` times, ``--after-s`` seconds apart;
- reload: ``--model-control-mode explicit``; ``--swaps`` explicit loads, each with a config that
  differs from the last (``dynamic_batching`` on, then off), ``--after-s`` seconds apart.

A swap window runs from the moment the version folder is moved in (poll) or the load call
starts (reload) until one second after the new version answered its first request (poll) or the
load call returned (reload): loading, warming up, publishing and draining the old version all
fall inside it. Steady is every request outside the windows. The goals: no failed request, and
a p99 inside the windows at most twice the steady p99.

Then, in this process, what :class:`inferd.repository.recent.RecentRequests` costs: its
``observe`` alone (ns per call), and the engine's in-process ``infer`` on a tiny model with and
without it as an observer (rounds interleaved; the medians and their difference).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import tempfile
import threading
import time
import timeit
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from onnx import TensorProto, helper, numpy_helper

from inferd.core.inference import InferRequest
from inferd.repository.recent import RecentRequests
from inferd.testing import running_server

WIDTHS = [256, 1024, 1024, 16]
CONFIG = """
name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
"""


def mlp(seed: int) -> bytes:
    """A ReLU MLP of ``WIDTHS`` with random weights (``seed``), batch dimension free."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    current = "input"
    for i, (a, b) in enumerate(itertools.pairwise(WIDTHS)):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [current, f"w{i}"], [f"m{i}"]))
        last = i == len(WIDTHS) - 2
        out = "output" if last else f"h{i}"
        nodes.append(helper.make_node("Identity" if last else "Relu", [f"m{i}"], [out]))
        current = out
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", WIDTHS[0]])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", WIDTHS[-1]])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def write_version(root: Path, staging: Path, version: int) -> None:
    """Build version ``version`` aside and move it into the model with one rename."""
    folder = staging / str(version)
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(mlp(version))
    os.rename(folder, root / "mlp" / str(version))


@dataclass
class Load:
    """``concurrency`` clients sending requests without a version until stopped (a thread of
    its own); each request's start and end on the monotonic clock, its version or its error."""

    url: str
    concurrency: int
    done: list[tuple[float, float, str]] = field(default_factory=list)
    failures: list[tuple[float, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def first_answer_of(self, version: str, since: float, timeout_s: float = 120.0) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for start, _end, answered in reversed(self.done[-4 * self.concurrency :]):
                if answered == version and start >= since:
                    return min(e for s, e, v in self.done if v == version and s >= since)
            time.sleep(0.02)
        raise RuntimeError(f"version {version} never answered")

    async def _run(self) -> None:
        await asyncio.gather(*(self._client(i) for i in range(self.concurrency)))

    async def _client(self, index: int) -> None:
        item = httpclient.InferInput("input", [1, WIDTHS[0]], "FP32")
        rng = np.random.default_rng(index)
        item.set_data_from_numpy(rng.standard_normal((1, WIDTHS[0])).astype(np.float32))
        client = aioclient.InferenceServerClient(self.url, conn_limit=1)
        try:
            while not self._stop.is_set():
                start = time.monotonic()
                try:
                    result = await client.infer("mlp", [item])
                    version = str(result.get_response()["model_version"])
                except Exception as exc:
                    self.failures.append((start, repr(exc)))
                else:
                    self.done.append((start, time.monotonic(), version))
        finally:
            await client.close()


def p99_ms(latencies: list[float]) -> float:
    return float(np.percentile(latencies, 99) * 1000) if latencies else float("nan")


def split(load: Load, windows: list[tuple[float, float]], after: float) -> tuple[list, list]:
    """Latencies of requests that overlap a window, and of the steady ones (started after
    ``after``, the clients' own warm-up)."""
    inside, steady = [], []
    for start, end, _ in load.done:
        if start < after:
            continue
        if any(start < w_end and end > w_start for w_start, w_end in windows):
            inside.append(end - start)
        else:
            steady.append(end - start)
    return inside, steady


def _repository(tmp: Path) -> tuple[Path, Path]:
    """A repository under ``tmp`` with version 1 of ``mlp``, and the staging folder beside it."""
    repo, staging = tmp / "models", tmp / "staging"
    (repo / "mlp").mkdir(parents=True)
    (repo / "mlp" / "config.pbtxt").write_text(CONFIG)
    write_version(repo, staging, 1)
    return repo, staging


def run_poll(args: argparse.Namespace, warmup: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="swap-") as tmp:
        repo, staging = _repository(Path(tmp))
        flags = ["--model-control-mode", "poll", "--repository-poll-secs", "0.5"]
        flags += ["--warmup-from-recent", str(warmup)]
        with running_server([repo], flags) as server:
            load = Load(server.http_url, args.concurrency)
            load.start()
            began = time.monotonic()
            time.sleep(args.steady_s)
            windows = []
            for version in range(2, 2 + args.swaps):
                placed = time.monotonic()
                write_version(repo, staging, version)
                first = load.first_answer_of(str(version), placed)
                windows.append((placed, first + 1.0))
                time.sleep(args.after_s)
            load.stop()
    return summary("poll", warmup, load, windows, began + 1.0)


def run_reload(args: argparse.Namespace, warmup: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="swap-") as tmp:
        repo, _ = _repository(Path(tmp))
        flags = ["--model-control-mode", "explicit", "--load-model", "mlp"]
        flags += ["--warmup-from-recent", str(warmup)]
        with (
            running_server([repo], flags) as server,
            httpclient.InferenceServerClient(server.http_url, network_timeout=300) as control,
        ):
            base = control.get_model_config("mlp")
            load = Load(server.http_url, args.concurrency)
            load.start()
            began = time.monotonic()
            time.sleep(args.steady_s)
            windows = []
            for swap in range(args.swaps):
                config = dict(base)
                config.pop("dynamic_batching", None)
                if swap % 2 == 0:
                    config["dynamic_batching"] = {"max_queue_delay_microseconds": 200}
                started = time.monotonic()
                control.load_model("mlp", config=json.dumps(config))
                windows.append((started, time.monotonic() + 1.0))
                time.sleep(args.after_s)
            load.stop()
    return summary("reload", warmup, load, windows, began + 1.0)


def summary(
    kind: str, warmup: int, load: Load, windows: list[tuple[float, float]], after: float
) -> dict[str, object]:
    inside, steady = split(load, windows, after)
    row = {
        "swap": kind,
        "warmup_from_recent": warmup,
        "requests": len(load.done),
        "failed": len(load.failures),
        "windows_s": round(sum(e - s for s, e in windows), 1),
        "steady_p99_ms": round(p99_ms(steady), 2),
        "swap_p99_ms": round(p99_ms(inside), 2),
        "swap_max_ms": round(max(inside) * 1000, 1) if inside else float("nan"),
        "ratio": round(p99_ms(inside) / p99_ms(steady), 2),
        "throughput": round(len(steady) / max(1e-9, _steady_seconds(load, windows, after)), 0),
    }
    if load.failures:
        row["first_failure"] = load.failures[0][1][:200]
    print(json.dumps(row), flush=True)
    return row


def _steady_seconds(load: Load, windows: list[tuple[float, float]], after: float) -> float:
    end = max(e for _, e, _ in load.done)
    return end - after - sum(e - s for s, e in windows)


def ring_cost(rounds: int) -> dict[str, float]:
    """ns per ``observe``, and the engine's in-process infer with and without the ring."""
    from inferd.codecs.model_config import parse_pbtxt, spec_from_proto

    spec = spec_from_proto(parse_pbtxt(CONFIG, "mlp/config.pbtxt"))
    ring = RecentRequests(8)
    request = InferRequest("mlp", {"input": np.zeros((1, 256), np.float32)})
    calls = 200_000
    per_call = min(
        timeit.repeat(lambda: ring.observe(spec, 1, request, {}), number=calls, repeat=5)
    )
    with_ring, without = asyncio.run(_engine_rounds(rounds))
    return {
        "observe_ns": round(per_call / calls * 1e9, 1),
        "infer_us_without": round(statistics.median(without), 2),
        "infer_us_with": round(statistics.median(with_ring), 2),
        "infer_us_without_min": round(min(without), 2),
        "infer_us_with_min": round(min(with_ring), 2),
    }


async def _engine_rounds(rounds: int) -> tuple[list[float], list[float]]:
    from inferd.repository.manager import ControlMode
    from inferd.server import Server, ServerConfig

    identity = helper.make_graph(
        [helper.make_node("Identity", ["input"], ["output"])],
        "noop",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 16])],
    )
    model = helper.make_model(identity, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    results: dict[int, list[float]] = {0: [], 8: []}
    with tempfile.TemporaryDirectory(prefix="ring-") as tmp:
        folder = Path(tmp) / "noop" / "1"
        folder.mkdir(parents=True)
        (folder / "model.onnx").write_bytes(model.SerializeToString())
        servers = {}
        for warmup in (0, 8):
            config = ServerConfig(
                model_repositories=(Path(tmp),),
                model_control_mode=ControlMode.NONE,
                allow_http=False,
                allow_grpc=False,
                allow_metrics=False,
                warmup_from_recent=warmup,
            )
            servers[warmup] = Server(config)
            await servers[warmup].start()
        try:
            request = InferRequest("noop", {"input": np.zeros((1, 16), np.float32)})
            for round_ in range(rounds):  # the order alternates, so drift hits both alike
                order = list(servers.items())
                for warmup, server in order if round_ % 2 else order[::-1]:
                    engine = server.engine
                    n = 20_000
                    start = time.perf_counter()
                    for _ in range(n):
                        await engine.infer(request)
                    results[warmup].append((time.perf_counter() - start) / n * 1e6)
        finally:
            for server in servers.values():
                await server.stop()
    return results[8], results[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--steady-s", type=float, default=8.0)
    parser.add_argument("--swaps", type=int, default=4)
    parser.add_argument("--after-s", type=float, default=3.0)
    parser.add_argument("--warmup-from-recent", type=int, nargs="+", default=[8, 0])
    parser.add_argument("--ring-rounds", type=int, default=9)
    parser.add_argument("--ring-only", action="store_true", help="measure only the ring's cost")
    args = parser.parse_args()
    rows = []
    for warmup in [] if args.ring_only else args.warmup_from_recent:
        rows.append(run_poll(args, warmup))
        rows.append(run_reload(args, warmup))
    if rows:
        print_table(rows)
    cost = ring_cost(args.ring_rounds)
    print()
    print(
        f"recent-request ring: observe {cost['observe_ns']} ns per request; in-process infer "
        f"of a no-op model {cost['infer_us_without']} us without it, {cost['infer_us_with']} us "
        f"with it (medians of {args.ring_rounds} interleaved rounds; fastest rounds "
        f"{cost['infer_us_without_min']} and {cost['infer_us_with_min']} us)"
    )


def print_table(rows: list[dict[str, object]]) -> None:
    print()
    header = f"{'swap':8} {'recent':>6} {'requests':>9} {'failed':>6} {'steady p99':>11} "
    header += f"{'swap p99':>9} {'ratio':>6} {'swap max':>9} {'req/s':>7}"
    print(header)
    for r in rows:
        print(
            f"{r['swap']:8} {r['warmup_from_recent']:>6} {r['requests']:>9} {r['failed']:>6} "
            f"{r['steady_p99_ms']:>9}ms {r['swap_p99_ms']:>7}ms {r['ratio']:>6} "
            f"{r['swap_max_ms']:>7}ms {r['throughput']:>7}"
        )


if __name__ == "__main__":
    main()
