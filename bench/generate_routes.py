"""The HTTP generate extension beside JSON ``infer``, at concurrency 1, in one run.

``simple`` (INT32 add/sub, 16 elements) through ``/infer`` (v2 JSON), ``/generate`` and
``/generate_stream`` (one event), rounds interleaved so that the machine's load falls on all
three alike; then ``repeat_int32`` streaming 100 responses per request (no delay) through
``/generate_stream``, as events per second.

    python bench/generate_routes.py [--requests 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from inferd.examples.simple_models import build_simple
from inferd.examples.streaming_models import build_streaming
from inferd.testing import running_server

_ROW = list(range(16))
_INFER = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": _ROW},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
    ]
}
_GENERATE = {"INPUT0": _ROW, "INPUT1": [1] * 16}


def _latencies_us(client: httpx.Client, path: str, body: object, count: int) -> list[float]:
    took = []
    for _ in range(count):
        start = time.perf_counter()
        reply = client.post(path, json=body)
        took.append((time.perf_counter() - start) * 1e6)
        reply.raise_for_status()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per route and round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    repo = Path(tempfile.mkdtemp()) / "models"
    build_simple("simple", repo / "simple")
    build_streaming("repeat_int32", repo / "repeat_int32")
    routes = {
        "infer (v2 JSON)": ("/v2/models/simple/infer", _INFER),
        "generate": ("/v2/models/simple/generate", _GENERATE),
        "generate_stream": ("/v2/models/simple/generate_stream", _GENERATE),
    }
    with (
        running_server([repo]) as server,
        httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as client,
    ):
        samples: dict[str, list[float]] = {name: [] for name in routes}
        for path, body in routes.values():  # warm-up
            _latencies_us(client, path, body, 20)
        for _ in range(args.rounds):
            for name, (path, body) in routes.items():
                samples[name] += _latencies_us(client, path, body, args.requests)
        base = statistics.median(samples["infer (v2 JSON)"])
        print(f"simple, concurrency 1, {args.rounds} x {args.requests} requests per route")
        for name, took in samples.items():
            median = statistics.median(took)
            p99 = statistics.quantiles(took, n=100)[98]
            print(f"  {name:18s} p50 {median:7.0f} us  p99 {p99:7.0f} us  x{median / base:.2f}")
        count = 100
        body = {"IN": list(range(count)), "DELAY": [0] * count, "WAIT": 0}
        events = 0
        start = time.perf_counter()
        for _ in range(20):
            reply = client.post("/v2/models/repeat_int32/generate_stream", json=body)
            events += reply.text.count("data: ")
        elapsed = time.perf_counter() - start
        print(
            f"repeat_int32 generate_stream: {events} events in {elapsed:.2f} s, "
            f"{events / elapsed:.0f} events/s"
        )


if __name__ == "__main__":
    main()
