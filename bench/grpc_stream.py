"""A decoupled model on one gRPC ``ModelStreamInfer`` stream, in one run.

``repeat_int32`` (no delay) through tritonclient's stream: responses per second for requests
sent one after another, and for several requests running at once on the stream (how often
consecutive responses belong to different requests shows that they interleave); then the
time to a fast request's answer when it follows a slow one on the same stream.

    python bench/grpc_stream.py [--responses 100] [--requests 20] [--parallel 8]
"""

from __future__ import annotations

import argparse
import itertools
import queue
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from inferd.examples.streaming_models import build_streaming
from inferd.testing import running_server


def _inputs(count: int, delay_us: int) -> list[Any]:
    data = {
        "IN": np.arange(count, dtype=np.int32),
        "DELAY": np.full(count, delay_us, dtype=np.uint32),
        "WAIT": np.zeros(1, dtype=np.uint32),
    }
    inputs = []
    for name, array in data.items():
        item = grpcclient.InferInput(name, list(array.shape), "INT32" if name == "IN" else "UINT32")
        item.set_data_from_numpy(array)
        inputs.append(item)
    return inputs


class Stream:
    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.got: queue.Queue[tuple[float, Any]] = queue.Queue()
        self.client.start_stream(
            callback=lambda result, error: self.got.put((time.perf_counter(), error or result))
        )

    def send(self, count: int, delay_us: int, request_id: str) -> None:
        self.client.async_stream_infer(
            "repeat_int32", _inputs(count, delay_us), request_id=request_id
        )

    def take(self, count: int) -> list[tuple[float, Any]]:
        items = [self.got.get(timeout=120) for _ in range(count)]
        for _, item in items:
            if not hasattr(item, "get_response"):
                raise SystemExit(f"error response: {item}")
        return items

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=100, help="responses per request")
    parser.add_argument("--requests", type=int, default=20, help="requests one after another")
    parser.add_argument("--parallel", type=int, default=8, help="requests at once")
    args = parser.parse_args()
    repo = Path(tempfile.mkdtemp()) / "models"
    build_streaming("repeat_int32", repo / "repeat_int32")
    with running_server([repo]) as server:
        stream = Stream(server.grpc_url)
        try:
            stream.send(10, 0, "warm-up")
            stream.take(10)

            start = time.perf_counter()
            for r in range(args.requests):
                stream.send(args.responses, 0, f"s{r}")
                stream.take(args.responses)
            elapsed = time.perf_counter() - start
            events = args.requests * args.responses
            print(
                f"one request at a time: {events} responses in {elapsed:.2f} s, "
                f"{events / elapsed:.0f} responses/s"
            )

            start = time.perf_counter()
            for r in range(args.parallel):
                stream.send(args.responses, 0, f"p{r}")
            items = stream.take(args.parallel * args.responses)
            elapsed = time.perf_counter() - start
            ids = [item.get_response().id for _, item in items]
            switches = sum(1 for a, b in itertools.pairwise(ids) if a != b)
            events = len(items)
            print(
                f"{args.parallel} requests at once: {events} responses in {elapsed:.2f} s, "
                f"{events / elapsed:.0f} responses/s; consecutive responses of different "
                f"requests: {switches} of {events - 1}"
            )

            slow_us = 200_000
            sent = time.perf_counter()
            stream.send(1, slow_us, "slow")
            stream.send(1, 0, "fast")
            (first_at, first), (second_at, second) = stream.take(2)
            print(
                f"slow ({slow_us // 1000} ms) then fast on one stream: "
                f"'{first.get_response().id}' after {(first_at - sent) * 1e3:.1f} ms, "
                f"'{second.get_response().id}' after {(second_at - sent) * 1e3:.1f} ms"
            )
        finally:
            stream.close()


if __name__ == "__main__":
    main()
