"""Large JSON inference bodies against a real ``inferd serve``: memory, health and small latency.

    PYTHONPATH=. .venv/bin/python bench/http_json_bodies.py [--mib 7.9] [--concurrent 4] [--small N]

Three figures, measured in one run on this machine:

1. peak RSS growth of the server for one JSON request of ``--mib`` MiB of FP32 numbers (the
   kernel's high-water mark, reset through ``/proc/<pid>/clear_refs`` just before the request),
   as a multiple of the body size;
2. ``/v2/health/live`` latency (p50 and max) on a keep-alive connection while ``--concurrent``
   such requests are in flight;
3. latency of ``--small`` small JSON requests to ``simple`` on one keep-alive connection.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import orjson
from onnx import TensorProto

from inferd.examples.simple_models import build_simple
from inferd.testing import running_server
from tests.helpers.models import identity_model, write_model

ECHO_CONFIG = """
name: "{name}" platform: "onnxruntime_onnx" max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _json_body(mib: float) -> bytes:
    """A JSON body of about ``mib`` MiB of FP32 numbers as v2 clients write them."""
    rng = np.random.default_rng(0)
    probe = rng.random(1000, dtype=np.float32)
    per_element = len(orjson.dumps(probe.tolist())) / 1000
    count = int(mib * 1024 * 1024 / per_element) - 64
    data = rng.random(count, dtype=np.float32)
    body = {
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [count], "data": data.tolist()}],
        "parameters": {"binary_data_output": True},
    }
    return orjson.dumps(body)


def _post(port: int, path: str, body: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=float, default=7.9)
    parser.add_argument("--concurrent", type=int, default=4)
    parser.add_argument("--small", type=int, default=2000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        write_model(
            repo, "echo_fp32", identity_model([("X", "Y", TensorProto.FLOAT)], [None]), ECHO_CONFIG
        )
        (repo / "simple").mkdir()
        build_simple("simple", repo / "simple")
        body = _json_body(args.mib)
        print(f"JSON body: {len(body) / 2**20:.2f} MiB")
        with running_server([repo], ["--http-max-input-size", str(256 * 2**20)]) as server:
            port = server.ports["http"]
            pid = server.process.pid
            infer = "/v2/models/echo_fp32/infer"
            status, _ = _post(port, infer, _json_body(0.01))  # warm up imports and allocator
            assert status == 200, status

            # 1. peak memory of one large request
            rss = _status(pid, "VmRSS")
            Path(f"/proc/{pid}/clear_refs").write_text("5")
            status, reply = _post(port, infer, body)
            assert status == 200, (status, reply[:300])
            peak = _status(pid, "VmHWM") - rss
            print(
                f"peak RSS growth, one request: {peak / 2**20:.0f} MiB "
                f"= {peak / len(body):.1f} x body"
            )

            # 2. health latency while large requests are in flight
            done = threading.Event()
            pending = [args.concurrent]
            lock = threading.Lock()

            def big() -> None:
                s, r = _post(port, infer, body)
                assert s == 200, (s, r[:300])
                with lock:
                    pending[0] -= 1
                    if not pending[0]:
                        done.set()

            threads = [threading.Thread(target=big) for _ in range(args.concurrent)]
            probe = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            probe.request("GET", "/v2/health/live")
            probe.getresponse().read()
            for t in threads:
                t.start()
            latencies: list[float] = []
            while not done.is_set():
                start = time.perf_counter()
                probe.request("GET", "/v2/health/live")
                probe.getresponse().read()
                latencies.append(time.perf_counter() - start)
            for t in threads:
                t.join()
            probe.close()
            print(
                f"health while {args.concurrent} large requests in flight: {len(latencies)} "
                f"probes, p50 {statistics.median(latencies) * 1e3:.1f} ms, "
                f"max {max(latencies) * 1e3:.1f} ms"
            )

            # 3. small requests on one keep-alive connection
            small = orjson.dumps(
                {
                    "inputs": [
                        {
                            "name": "INPUT0",
                            "datatype": "INT32",
                            "shape": [1, 16],
                            "data": list(range(16)),
                        },
                        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
                    ]
                }
            )
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            times: list[float] = []
            for _ in range(args.small + 100):
                start = time.perf_counter()
                conn.request(
                    "POST", "/v2/models/simple/infer", small, {"Content-Type": "application/json"}
                )
                reply = conn.getresponse()
                reply.read()
                times.append(time.perf_counter() - start)
                assert reply.status == 200
            conn.close()
            times = sorted(times[100:])
            print(
                f"small JSON requests ({args.small}, one connection): "
                f"mean {statistics.fmean(times) * 1e6:.0f} us, "
                f"p50 {times[len(times) // 2] * 1e6:.0f} us, "
                f"p99 {times[int(len(times) * 0.99)] * 1e6:.0f} us"
            )


if __name__ == "__main__":
    main()
