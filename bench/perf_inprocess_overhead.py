"""What ``inferd perf -i in-process`` adds over calling ONNX Runtime directly.

Two loops over the same model file and the same inputs, at concurrency 1, in alternating rounds:

- **raw**: ``session.run`` of an ONNX Runtime session (the thread count inferd gives a single
  instance on this machine), each call timed with ``perf_counter_ns``, in a fresh process that
  imports only numpy and onnxruntime;
- **inferd perf**: ``inferd perf -m MODEL -i in-process --model-repository R`` (the server on the
  load generator's event loop, requests built once, ``await engine.infer``), one subprocess per
  round, its JSON read back.

It prints each round's average and p50 latency per request for both, and the difference of
the medians: the cost of the whole server path (validation, scheduling, instance dispatch, the
response) plus the load generator's own bookkeeping. Run it alone on the machine:

    flock /tmp/bench.lock .venv/bin/python bench/perf_inprocess_overhead.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RAW = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import onnxruntime as ort

    path, threads, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
    kinds = {"tensor(int32)": np.int32, "tensor(float)": np.float32, "tensor(int64)": np.int64}
    rng = np.random.default_rng(0)
    feeds = {}
    for i in session.get_inputs():
        shape = [1 if not isinstance(d, int) or d < 0 else d for d in i.shape]
        feeds[i.name] = rng.integers(0, 100, shape).astype(kinds[i.type])
    for _ in range(200):
        session.run(None, feeds)
    clock = time.perf_counter_ns
    latencies = []
    end = clock() + int(seconds * 1e9)
    while clock() < end:
        start = clock()
        session.run(None, feeds)
        latencies.append(clock() - start)
    latencies.sort()
    print(json.dumps({"avg_us": sum(latencies) / len(latencies) / 1000,
                      "p50_us": latencies[len(latencies) // 2] / 1000, "count": len(latencies)}))
    """
)


def raw_round(model_file: Path, threads: int, seconds: float) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", RAW, str(model_file), str(threads), str(seconds)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def perf_round(model: str, repository: Path, window_ms: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "perf.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "inferd.cli.main",
                "perf",
                "-m",
                model,
                "-i",
                "in-process",
                "--model-repository",
                str(repository),
                "-p",
                str(window_ms),
                "-r",
                "5",
                "-q",
                "--json-output",
                str(out),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        point = json.loads(out.read_text())["points"][0]
    return {
        "avg_us": point["avg_latency_us"],
        "p50_us": point["percentiles_us"]["50"],
        "count": point["request_count"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="simple")
    parser.add_argument("--repository", type=Path, default=ROOT / "examples" / "models")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-ms", type=int, default=1000)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "src"))
    from inferd.backends.threads import available_cores

    model_file = args.repository / args.model / "1" / "model.onnx"
    threads = available_cores()  # one instance gets every core (backends/threads.py)
    raw, perf = [], []
    for index in range(args.rounds):
        # a perf round measures up to 5 windows, of which it reports the last 3
        raw.append(raw_round(model_file, threads, seconds=3 * args.window_ms / 1000))
        perf.append(perf_round(args.model, args.repository, args.window_ms))
        print(
            f"round {index + 1}: raw onnxruntime avg {raw[-1]['avg_us']:.1f} usec, "
            f"p50 {raw[-1]['p50_us']:.1f} | inferd perf in-process avg {perf[-1]['avg_us']:.1f} "
            f"usec, p50 {perf[-1]['p50_us']:.1f}",
            flush=True,
        )
    for key, name in (("avg_us", "average"), ("p50_us", "p50")):
        a = statistics.median(r[key] for r in raw)
        b = statistics.median(r[key] for r in perf)
        print(
            f"{name}: raw {a:.1f} usec, inferd perf in-process {b:.1f} usec, "
            f"difference {b - a:.1f} usec per request"
        )


if __name__ == "__main__":
    main()
