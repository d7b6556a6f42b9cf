"""What a response-cache hit costs, beside the server's no-op request path, in one run.

    .venv/bin/python bench/response_cache.py [--seconds 2] [--rounds 5] [--perf-analyzer PATH]

Starts one ``inferd serve --cache-config local,size=16777216`` on free ports with three models,
each FP32 ``[-1, 16]`` in and out:

- ``noop``: an ONNX Identity, no cache: the cheapest request the server can run;
- ``costly``: a chain of 256-wide matrix products (``--layers``, 96 by default: about a
  millisecond of compute), with ``response_cache { enable: true }``: after the first request
  every identical one is a hit;
- ``costly_uncached``: the same model without the cache, for the cost a hit saves.

Then, at concurrency 1, it measures each path through the real clients: tritonclient's HTTP
(binary tensors) and gRPC clients in this process, rounds interleaved so drift hits every path
alike (the figure is the median of the rounds), and perf_analyzer when one is found (``--perf-
analyzer``, else where bench/generators.py looks: ``PERF_ANALYZER``, ``INFERD_PERF_ANALYZER`` or
``~/.cache/perf_analyzer/perf_analyzer``). It prints
microseconds per request, requests per second, the hit / no-op ratio (the goal: at most 1.10)
and the server's own per-request times from the statistics extension.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from generators import PERF_ANALYZER  # bench/ is on sys.path: the script's own folder
from onnx import TensorProto, helper, numpy_helper

from inferd.testing import running_server

WIDTH = 16
CONFIG = """
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {width} ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}
"""
PA_LINE = re.compile(r"Concurrency: 1, throughput: ([0-9.]+) infer/sec, latency (\d+) usec")


def _model(layers: int) -> bytes:
    """Identity when ``layers`` is 0; else ``layers`` 256x256 products with tanh between."""
    x = helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", WIDTH])
    y = helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", WIDTH])
    if layers == 0:
        graph = helper.make_graph(
            [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])], "n", [x], [y]
        )
    else:
        rng = np.random.default_rng(0)
        inits = [
            numpy_helper.from_array(rng.normal(0, 0.05, (WIDTH, 256)).astype(np.float32), "w_in"),
            numpy_helper.from_array(rng.normal(0, 0.05, (256, 256)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.normal(0, 0.05, (256, WIDTH)).astype(np.float32), "w_out"),
        ]
        nodes = [helper.make_node("MatMul", ["INPUT", "w_in"], ["h0"])]
        for i in range(layers):
            nodes.append(helper.make_node("MatMul", [f"h{i}", "w"], [f"m{i}"]))
            nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"h{i + 1}"]))
        nodes.append(helper.make_node("MatMul", [f"h{layers}", "w_out"], ["OUTPUT"]))
        graph = helper.make_graph(nodes, "costly", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _write_repo(root: Path, layers: int) -> None:
    for name, depth, extra in (
        ("noop", 0, ""),
        ("costly", layers, "response_cache { enable: true }"),
        ("costly_uncached", layers, ""),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.onnx").write_bytes(_model(depth))
        (root / name / "config.pbtxt").write_text(
            CONFIG.format(name=name, width=WIDTH, extra=extra)
        )


def _callers(http_url: str, grpc_url: str) -> dict[str, Callable[[str], Any]]:
    data = np.random.default_rng(1).random((1, WIDTH), dtype=np.float32)
    http = httpclient.InferenceServerClient(http_url)
    grpc = grpcclient.InferenceServerClient(grpc_url)
    h_in = httpclient.InferInput("INPUT", [1, WIDTH], "FP32")
    h_in.set_data_from_numpy(data, binary_data=True)
    h_out = [httpclient.InferRequestedOutput("OUTPUT", binary_data=True)]
    g_in = grpcclient.InferInput("INPUT", [1, WIDTH], "FP32")
    g_in.set_data_from_numpy(data)
    return {
        "HTTP": lambda model: http.infer(model, [h_in], outputs=h_out),
        "gRPC": lambda model: grpc.infer(model, [g_in]),
    }


def _time_per_call_us(call: Callable[[], Any], seconds: float) -> float:
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(20):
            call()
        calls += 20
        now = time.perf_counter()
        if now >= deadline:
            return (now - start) / calls * 1e6


def _server_us(url: str, model: str) -> tuple[float, float]:
    """The server's mean request time for ``model`` and, for hits, the mean lookup (µs)."""
    client = httpclient.InferenceServerClient(url)
    try:
        phases = client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]
    finally:
        client.close()
    success, hit = phases["success"], phases["cache_hit"]
    mean = success["ns"] / max(success["count"], 1) / 1000
    return mean, hit["ns"] / max(hit["count"], 1) / 1000


def _perf_analyzer(binary: Path, url: str, protocol: str, model: str) -> tuple[float, float]:
    done = subprocess.run(
        [
            str(binary),
            "-m",
            model,
            "-u",
            url,
            "-i",
            protocol,
            "--concurrency-range",
            "1",
            "--measurement-interval",
            "3000",
            "--stability-percentage",
            "50",
            "--max-trials",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = PA_LINE.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"perf_analyzer failed:\n{done.stdout}\n{done.stderr}")
    return float(found.group(1)), float(found.group(2))


def _find_perf_analyzer(given: str | None) -> Path | None:
    """``--perf-analyzer``, else where every benchmark looks (bench/generators.py)."""
    for candidate in (Path(given) if given else None, PERF_ANALYZER):
        if candidate is not None and candidate.exists():
            return candidate
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per path and round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    parser.add_argument("--layers", type=int, default=96, help="256-wide layers of 'costly'")
    parser.add_argument("--perf-analyzer", default=None, help="perf_analyzer binary")
    args = parser.parse_args()

    paths = [
        ("no-op (identity, no cache)", "noop"),
        ("cache hit (costly, cached)", "costly"),
        ("costly, no cache", "costly_uncached"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        _write_repo(repo, args.layers)
        flags = ["--cache-config", "local,size=16777216"]
        with running_server([repo], flags) as server:
            callers = _callers(server.http_url, server.grpc_url)
            samples: dict[tuple[str, str], list[float]] = {}
            for call in callers.values():  # warm every path; the first "costly" call misses
                for _, model in paths:
                    for _ in range(50):
                        call(model)
            for _ in range(args.rounds):
                for proto, call in callers.items():
                    for _, model in paths:
                        per = _time_per_call_us(lambda c=call, m=model: c(m), args.seconds)
                        samples.setdefault((proto, model), []).append(per)

            print(f"response cache vs no-op path, concurrency 1, median of {args.rounds} rounds")
            print(f"{'client':<10} {'path':<30} {'us/request':>11} {'req/s':>9} {'vs no-op':>9}")
            for proto in callers:
                base = statistics.median(samples[(proto, "noop")])
                for label, model in paths:
                    us = statistics.median(samples[(proto, model)])
                    print(f"{proto:<10} {label:<30} {us:>11.1f} {1e6 / us:>9.0f} {us / base:>9.3f}")

            binary = _find_perf_analyzer(args.perf_analyzer)
            if binary is None:
                print("perf_analyzer: not found (pass --perf-analyzer PATH)")
            else:
                for proto, url in (("http", server.http_url), ("grpc", server.grpc_url)):
                    try:
                        figures = {m: _perf_analyzer(binary, url, proto, m) for _, m in paths}
                    except RuntimeError as exc:  # e.g. no stable window on a busy machine
                        print(f"pa {proto}: no figures ({str(exc).strip().splitlines()[-1]})")
                        continue
                    base_lat = figures["noop"][1]
                    for label, model in paths:
                        rps, lat = figures[model]
                        print(
                            f"{'pa ' + proto:<10} {label:<30} {lat:>11.1f} {rps:>9.0f} "
                            f"{lat / base_lat:>9.3f}"
                        )

            print("server-side mean request time (statistics extension, whole run):")
            for label, model in paths:
                mean, lookup = _server_us(server.http_url, model)
                extra = f", lookup {lookup:.1f} us" if model == "costly" else ""
                print(f"  {label:<30} {mean:>8.1f} us{extra}")


if __name__ == "__main__":
    main()
