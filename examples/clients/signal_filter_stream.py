"""Stream a signal in chunks to the ``signal_filter`` sequence model over gRPC.

The server keeps the filter's state between chunks (implicit state), so each chunk is smoothed as
if the whole signal had been sent at once. Several signals are streamed at the same time, each as
its own sequence; the script checks every result against the same filter run locally.

    inferd serve --model-repository examples/models &
    python examples/clients/signal_filter_stream.py --url localhost:8001
"""

from __future__ import annotations

import argparse
import queue
import sys
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

ALPHA = 0.25  # the model's ALPHA parameter


def smooth(signal: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The filter run over the whole signal at once, for comparison."""
    out = np.empty_like(signal)
    last = float(signal[0])
    for i, x in enumerate(signal):
        last = float(x) if i == 0 else last + ALPHA * (float(x) - last)
        out[i] = last
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="localhost:8001", help="gRPC address of the server")
    parser.add_argument("--signals", type=int, default=3, help="signals streamed at once")
    parser.add_argument("--chunks", type=int, default=5, help="chunks per signal")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    signals = {
        100 + s: (np.sin(np.arange(60) / (3 + s)) + rng.normal(0, 0.2, 60)).astype(np.float32)
        for s in range(args.signals)
    }
    answers: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(args.url) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        for step in range(args.chunks):  # the sequences' chunks interleave on one stream
            for sequence_id, signal in signals.items():
                chunk = np.array_split(signal, args.chunks)[step]
                data = grpcclient.InferInput("CHUNK", [len(chunk)], "FP32")
                data.set_data_from_numpy(chunk)
                client.async_stream_infer(
                    "signal_filter",
                    [data],
                    request_id=f"{sequence_id}-{step}",
                    sequence_id=sequence_id,
                    sequence_start=step == 0,
                    sequence_end=step == args.chunks - 1,
                )
        parts: dict[int, dict[int, np.ndarray[Any, Any]]] = {k: {} for k in signals}
        for _ in range(len(signals) * args.chunks):
            answer = answers.get(timeout=30)
            if isinstance(answer, Exception):
                print(f"error: {answer}")
                return 1
            sequence_id, step = map(int, answer.get_response().id.split("-"))
            parts[sequence_id][step] = answer.as_numpy("SMOOTHED")
        client.stop_stream()
    for sequence_id, signal in signals.items():
        got = np.concatenate([parts[sequence_id][i] for i in range(args.chunks)])
        if not np.allclose(got, smooth(signal), atol=1e-5):
            print(f"signal {sequence_id}: the streamed result differs from the local filter")
            return 1
        print(f"signal {sequence_id}: {len(signal)} samples in {args.chunks} chunks, smoothed OK")
    print("PASS: signal_filter")
    return 0


if __name__ == "__main__":
    sys.exit(main())
