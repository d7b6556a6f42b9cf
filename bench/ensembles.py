"""What a 3-step ensemble costs beside calling its three steps back to back, in one run.

    .venv/bin/python bench/ensembles.py [--seconds 2] [--rounds 3] [--layers 2]
        [--runtime-threads 1] [--no-network]

Builds a repository of three ONNX models (FP32 ``[-1, 64]`` in and out, ``--layers`` 64x256x64
matrix products each, dynamic batching, one instance with ``--runtime-threads`` intra-op threads)
and ``pipeline``, an ensemble chaining them. One thread each is the default: in the server's
default layout each of the three models gets every core with spinning threads, and on a small
machine the figures then measure how the OS schedules three spinning thread pools rather than
what the ensemble costs (``--runtime-threads 0`` measures that layout anyway).
Then, at concurrency 1 and 16:

- in process, on one event loop: ``steps`` awaits ``Engine.infer`` on each model in turn,
  feeding each one's output to the next; ``ensemble`` awaits one ``Engine.infer`` on
  ``pipeline``. Rounds alternate so drift hits both alike; each figure is the median of the
  rounds. The goals: the ensemble adds at most 10% latency at c=1 and keeps at least 90% of the
  throughput at c=16.
- over the network (``inferd serve`` on free ports, tritonclient gRPC, one client per thread):
  the ensemble in one request, and the three models as three requests.

Prints microseconds per request, requests per second, the event loop's CPU time per request
(the cost the ensemble adds lives there, and it is less sensitive to other work on the machine
than a rate) and the ensemble / steps ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
import uvloop
from onnx import TensorProto, helper, numpy_helper

from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest
from inferd.engine import Engine
from inferd.repository.manager import ControlMode, RepositoryManager
from inferd.testing import running_server

WIDTH = 64
STEPS = ("step_a", "step_b", "step_c")
STEP_CONFIG = """
name: "{name}" backend: "onnxruntime" max_batch_size: 16
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {width} ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
dynamic_batching {{ }}
{parameters}
"""
THREADS = 'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{threads}" }} }}'


def _step_model(layers: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", WIDTH])
    y = helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", WIDTH])
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.1, (WIDTH, 256)).astype(np.float32), "up"),
        numpy_helper.from_array(rng.normal(0, 0.1, (256, WIDTH)).astype(np.float32), "down"),
    ]
    nodes, current = [], "INPUT"
    for i in range(layers):
        nodes += [
            helper.make_node("MatMul", [current, "up"], [f"u{i}"]),
            helper.make_node("Tanh", [f"u{i}"], [f"t{i}"]),
            helper.make_node("MatMul", [f"t{i}", "down"], [f"d{i}"]),
        ]
        current = f"d{i}"
    nodes.append(helper.make_node("Identity", [current], ["OUTPUT"]))
    graph = helper.make_graph(nodes, "step", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _pipeline_config() -> str:
    steps = []
    for i, name in enumerate(STEPS):
        src = "INPUT" if i == 0 else f"t{i}"
        dst = "OUTPUT" if i == len(STEPS) - 1 else f"t{i + 1}"
        steps.append(
            f'{{ model_name: "{name}" model_version: -1 input_map {{ key: "INPUT" value: "{src}" }}'
            f' output_map {{ key: "OUTPUT" value: "{dst}" }} }}'
        )
    return (
        'name: "pipeline" platform: "ensemble" max_batch_size: 16 '
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ] '
        f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ] '
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}"
    )


def build_repository(root: Path, layers: int, threads: int = 1) -> None:
    """The three step models and the ensemble; ``threads`` 0 leaves the thread layout to the
    server's default."""
    parameters = THREADS.format(threads=threads) if threads > 0 else ""
    for seed, name in enumerate(STEPS):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(
            STEP_CONFIG.format(name=name, width=WIDTH, parameters=parameters)
        )
        (root / name / "1" / "model.onnx").write_bytes(_step_model(layers, seed))
    (root / "pipeline" / "1").mkdir(parents=True)
    (root / "pipeline" / "config.pbtxt").write_text(_pipeline_config())


# -- in process ---------------------------------------------------------------------------------

Call = Callable[[np.ndarray[Any, Any]], Awaitable[np.ndarray[Any, Any]]]


def in_process_calls(engine: Engine) -> dict[str, Call]:
    async def steps(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        for name in STEPS:
            x = (await engine.infer(InferRequest(name, {"INPUT": x}))).outputs["OUTPUT"]
        return x

    async def ensemble(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return (await engine.infer(InferRequest("pipeline", {"INPUT": x}))).outputs["OUTPUT"]

    return {"steps": steps, "ensemble": ensemble}


async def _measure(call: Call, concurrency: int, seconds: float) -> tuple[float, float, float]:
    """(requests per second, mean latency in µs, the loop thread's CPU µs per request) of
    ``concurrency`` callers for ``seconds``."""
    x = np.random.default_rng(1).normal(size=(1, WIDTH)).astype(np.float32)
    for _ in range(50):
        await call(x)
    done: list[int] = []
    latency: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        count, total = 0, 0.0
        while (now := time.perf_counter()) < deadline:
            await call(x)
            total += time.perf_counter() - now
            count += 1
        done.append(count)
        latency.append(total)

    start, cpu = time.perf_counter(), time.thread_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu
    count = max(1, sum(done))
    return sum(done) / elapsed, sum(latency) / count * 1e6, cpu / count * 1e6


async def run_in_process(root: Path, seconds: float, rounds: int) -> dict[tuple[str, int], Any]:
    manager = RepositoryManager([root], default_registry(), mode=ControlMode.NONE)
    failures = await manager.startup()
    if failures:
        raise SystemExit(f"models failed to load: {failures}")
    engine = Engine(manager, server_version="bench")
    calls = in_process_calls(engine)
    figures: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    try:
        for concurrency in (1, 16):
            for round_ in range(rounds):
                order = list(calls.items())
                for kind, call in order if round_ % 2 == 0 else reversed(order):  # ABBA
                    got = await _measure(call, concurrency, seconds / rounds)
                    figures.setdefault((kind, concurrency), []).append(got)
    finally:
        await manager.close()
    return {
        key: tuple(statistics.median(cell[i] for cell in v) for i in range(3))
        for key, v in figures.items()
    }


# -- over the network ---------------------------------------------------------------------------


def _network(url: str, kind: str, concurrency: int, seconds: float) -> tuple[float, float]:
    x = np.random.default_rng(1).normal(size=(1, WIDTH)).astype(np.float32)
    counts: list[int] = []
    totals: list[float] = []

    def worker() -> None:
        client = grpcclient.InferenceServerClient(url)

        def one(name: str, data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
            tensor = grpcclient.InferInput("INPUT", [1, WIDTH], "FP32")
            tensor.set_data_from_numpy(data)
            out = client.infer(name, [tensor]).as_numpy("OUTPUT")
            assert out is not None
            return out

        def request() -> None:
            if kind == "ensemble":
                one("pipeline", x)
            else:
                data = x
                for name in STEPS:
                    data = one(name, data)

        for _ in range(20):
            request()
        count, total = 0, 0.0
        deadline = time.perf_counter() + seconds
        while (now := time.perf_counter()) < deadline:
            request()
            total += time.perf_counter() - now
            count += 1
        counts.append(count)
        totals.append(total)
        client.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    return sum(counts) / elapsed, sum(totals) / max(1, sum(counts)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measured cell")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=2, help="matrix-product pairs per step")
    parser.add_argument(
        "--runtime-threads",
        type=int,
        default=1,
        help="intra-op threads of each step model (0: the server's default layout)",
    )
    parser.add_argument("--no-network", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="inferd-ens-bench-") as tmp:
        root = Path(tmp)
        build_repository(root, args.layers, args.runtime_threads)
        inproc = uvloop.run(run_in_process(root, args.seconds * args.rounds, args.rounds))
        threads = args.runtime_threads or "default"
        print(
            f"3-step chain, FP32 [1, {WIDTH}], {args.layers} layer pair(s) per step, "
            f"intra-op threads per step model: {threads}"
        )
        print("in process (Engine.infer), median of rounds:")
        print(
            f"  {'concurrency':>11} {'steps req/s':>12} {'steps µs':>9} {'loop µs':>8}"
            f" {'ens req/s':>10} {'ens µs':>8} {'loop µs':>8} {'latency ratio':>14}"
            f" {'throughput ratio':>17} {'loop CPU ratio':>15}"
        )
        for c in (1, 16):
            sr, sl, sc = inproc[("steps", c)]
            er, el, ec = inproc[("ensemble", c)]
            print(
                f"  {c:>11} {sr:>12.0f} {sl:>9.0f} {sc:>8.1f} {er:>10.0f} {el:>8.0f} {ec:>8.1f}"
                f" {el / sl:>14.3f} {er / sr:>17.3f} {ec / sc:>15.3f}"
            )
        if args.no_network:
            return
        with running_server([root]) as server:
            print("over the network (tritonclient gRPC, one client per thread):")
            for c in (1, 16):
                er, el = _network(server.grpc_url, "ensemble", c, args.seconds)
                sr, sl = _network(server.grpc_url, "steps", c, args.seconds)
                print(
                    f"  c={c:<3} ensemble {er:>7.0f} req/s {el:>7.0f} µs | three requests "
                    f"{sr:>7.0f} req/s {sl:>7.0f} µs | ensemble/three: latency "
                    f"{el / sl:.3f}, throughput {er / sr:.3f}"
                )


if __name__ == "__main__":
    main()
