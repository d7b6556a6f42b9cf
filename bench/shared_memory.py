"""A 16 MB FP32 tensor through system shared memory vs binary HTTP vs gRPC, concurrency 1.

    flock /tmp/bench.lock .venv/bin/python bench/shared_memory.py [--requests 40] [--mb 16]

One ``inferd serve`` (port 0 everywhere) serves an ONNX Identity model built here with one input
``INPUT`` and one output ``OUTPUT``, FP32 ``[N]`` (16 MB = 4,194,304 floats), no batching. One
client thread sends requests back to back through each path, in one run, interleaved round by
round (in a shuffled order) so that drifting machine load hits every path alike:

- ``http binary``: tritonclient HTTP, input and output as binary tensor data;
- ``grpc``: tritonclient gRPC (raw contents);
- ``http shm``: input and output in registered system shared-memory regions, the request carries
  only their names; the input is written into its region once, as perf_analyzer does;
- ``http shm + copies``: the same, but each request also copies its input into the region and
  its output out of it (what a client pays when its data is not produced in place);
- ``grpc shm``: shared memory through gRPC.

Printed: median and p90 latency per path, requests per second, and each path's speed-up over
binary HTTP (median latency ratio). Every response is checked against the input.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from onnx import TensorProto, helper

from inferd.testing import running_server

MODEL = "identity_fp32"


def build_repository(root: Path, elements: int) -> Path:
    """A repository with one ONNX Identity model over FP32 [elements]."""
    folder = root / MODEL / "1"
    folder.mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])],
        MODEL,
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [elements])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [elements])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, folder / "model.onnx")
    (root / MODEL / "config.pbtxt").write_text(
        f'name: "{MODEL}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        f'input [{{ name: "INPUT" data_type: TYPE_FP32 dims: [{elements}] }}]\n'
        f'output [{{ name: "OUTPUT" data_type: TYPE_FP32 dims: [{elements}] }}]\n'
        "instance_group [{ kind: KIND_CPU count: 1 }]\n"
    )
    return root


Call = Callable[[], np.ndarray]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40, help="per path (default: 40)")
    parser.add_argument("--mb", type=int, default=16, help="tensor size in MiB (default: 16)")
    args = parser.parse_args()
    elements = args.mb * 1024 * 1024 // 4
    nbytes = elements * 4
    data = np.random.default_rng(0).standard_normal(elements, dtype=np.float32)
    tag = f"inferd-bench-{os.getpid()}"

    with (
        tempfile.TemporaryDirectory() as tmp,
        running_server(
            [build_repository(Path(tmp), elements)],
            [
                "--allow-metrics=false",
                "--allow-shared-memory=true",
                "--http-max-input-size",
                str(2 * nbytes + (1 << 20)),
            ],
        ) as server,
    ):
        http = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        http.unregister_system_shared_memory()
        in_region = shm.create_shared_memory_region("bench_in", f"/{tag}-in", nbytes)
        out_region = shm.create_shared_memory_region("bench_out", f"/{tag}-out", nbytes)
        try:
            shm.set_shared_memory_region(in_region, [data])
            http.register_system_shared_memory("bench_in", f"/{tag}-in", nbytes)
            http.register_system_shared_memory("bench_out", f"/{tag}-out", nbytes)
            paths = _paths(http, grpc, data, in_region, out_region, nbytes)
            for call in paths.values():  # warm-up, and a check of every path
                np.testing.assert_array_equal(call(), data)
            times: dict[str, list[float]] = {name: [] for name in paths}
            order = list(paths)
            shuffle = np.random.default_rng(1).shuffle
            for _ in range(args.requests):
                shuffle(order)  # no path always follows the same one (large frees, caches)
                for name in order:
                    call = paths[name]
                    start = time.perf_counter()
                    result = call()
                    times[name].append(time.perf_counter() - start)
                    if result[-1] != data[-1]:
                        raise AssertionError(f"{name}: wrong output")
            _report(times, args.mb, args.requests)
        finally:
            http.unregister_system_shared_memory()
            shm.destroy_shared_memory_region(in_region)
            shm.destroy_shared_memory_region(out_region)
            http.close()
            grpc.close()
    return 0


def _paths(
    http: httpclient.InferenceServerClient,
    grpc: grpcclient.InferenceServerClient,
    data: np.ndarray,
    in_region: object,
    out_region: object,
    nbytes: int,
) -> dict[str, Call]:
    shape = list(data.shape)

    def http_binary() -> np.ndarray:
        item = httpclient.InferInput("INPUT", shape, "FP32")
        item.set_data_from_numpy(data, binary_data=True)
        out = httpclient.InferRequestedOutput("OUTPUT", binary_data=True)
        return http.infer(MODEL, [item], outputs=[out]).as_numpy("OUTPUT")

    def grpc_raw() -> np.ndarray:
        item = grpcclient.InferInput("INPUT", shape, "FP32")
        item.set_data_from_numpy(data)
        return grpc.infer(MODEL, [item]).as_numpy("OUTPUT")

    def through_shm(client: object, module: object, copies: bool) -> Call:
        def call() -> np.ndarray:
            if copies:
                shm.set_shared_memory_region(in_region, [data])
            item = module.InferInput("INPUT", shape, "FP32")  # type: ignore[attr-defined]
            item.set_shared_memory("bench_in", nbytes)
            out = module.InferRequestedOutput("OUTPUT")  # type: ignore[attr-defined]
            out.set_shared_memory("bench_out", nbytes)
            client.infer(MODEL, [item], outputs=[out])  # type: ignore[attr-defined]
            view = shm.get_contents_as_numpy(out_region, np.float32, shape)
            return np.array(view) if copies else view

        return call

    return {
        "http binary": http_binary,
        "grpc": grpc_raw,
        "http shm": through_shm(http, httpclient, copies=False),
        "http shm + copies": through_shm(http, httpclient, copies=True),
        "grpc shm": through_shm(grpc, grpcclient, copies=False),
    }


def _report(times: dict[str, list[float]], mb: int, requests: int) -> None:
    base = statistics.median(times["http binary"])
    print(f"{mb} MiB FP32 identity, concurrency 1, {requests} requests per path (interleaved)")
    print(f"{'path':<20}{'median ms':>11}{'p90 ms':>9}{'req/s':>8}{'vs http binary':>16}")
    for name, samples in times.items():
        ordered = sorted(samples)
        median = statistics.median(ordered)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        print(
            f"{name:<20}{median * 1e3:>11.2f}{p90 * 1e3:>9.2f}{1 / median:>8.1f}"
            f"{base / median:>15.2f}x"
        )


if __name__ == "__main__":
    sys.exit(main())
