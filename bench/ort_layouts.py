"""Raw ONNX Runtime thread layouts, in process: which layout serves a lone request and a full load.

    python bench/ort_layouts.py --model minilm                 # every layout, batch 1 2 4
    python bench/ort_layouts.py --model mlp --batch 1 --batch 64
    python bench/ort_layouts.py --model minilm --layout global2x2 --seconds 3

Each layout runs in its own process, because ONNX Runtime's global (process-wide) thread pool
can be sized once per process. A layout is ``<kind><sessions>x<threads>[-nospin]``:

- ``per`` sessions with their own intra-op pool of ``threads`` threads;
- ``global`` sessions that share one process-wide intra-op pool of ``threads`` threads
  (``set_global_thread_pool_sizes`` + ``use_per_session_threads = False``);
- ``mixed``: one session of 2 threads and one of 1 thread, each with its own pool;
- ``adaptive``: two 1-thread sessions and one shared 2-thread session; a call runs on the
  2-thread session when no other call is running, else on its caller's 1-thread session.

Suffixes: ``-nospin`` (``session.intra_op.allow_spinning = 0``), ``-spinN`` (spin for at most
N microseconds: ``session.intra_op.spin_duration_us``).

For each layout the script prints the batch-1 latency of sequential calls on one session (p50,
p99) and, per batch size, the throughput with one calling thread per session (what inferd does:
one worker thread per instance). Figures are from this run only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
MODELS = BENCH / ".work" / "models"

LAYOUTS = (
    "per1x1",
    "per1x2",
    "per2x1",
    "per2x2",
    "per2x2-nospin",
    "global1x2",
    "global2x2",
    "global2x1",
    "mixed",
    "mixed-nospin",
    "adaptive",
)


@dataclass(frozen=True)
class Layout:
    name: str
    shared: bool
    threads: tuple[int, ...]  # one entry per session
    spinning: bool
    spin_us: int | None = None
    adaptive: bool = False

    @classmethod
    def parse(cls, name: str) -> Layout:
        base, _, flag = name.partition("-")
        spinning = flag != "nospin"
        spin_us = int(flag.removeprefix("spin")) if flag.startswith("spin") else None
        if base == "mixed":
            return cls(name, False, (2, 1), spinning, spin_us)
        if base == "adaptive":
            return cls(name, False, (1, 1, 2), spinning, spin_us, adaptive=True)
        shared = base.startswith("global")
        sessions, threads = base.removeprefix("global").removeprefix("per").split("x")
        return cls(name, shared, (int(threads),) * int(sessions), spinning, spin_us)


class Adaptive:
    """Two callers, each with a 1-thread session; a call takes the shared 2-thread session when
    no other call is running."""

    def __init__(self, narrow: list[Any], wide: Any) -> None:
        self.narrow, self.wide = narrow, wide
        self.lock = threading.Lock()
        self.running = 0
        self.wide_calls = 0

    def run(self, index: int, feeds: dict[str, Any]) -> Any:
        with self.lock:
            use_wide = self.running == 0
            self.running += 1
            self.wide_calls += use_wide
        try:
            return (self.wide if use_wide else self.narrow[index]).run(None, feeds)
        finally:
            with self.lock:
                self.running -= 1


def model_inputs(model: str) -> dict[str, np.ndarray[Any, Any]]:
    if model == "minilm":
        data = np.load(MODELS / "minilm.inputs.npz")
        return {"input_ids": data["input_ids"], "attention_mask": data["attention_mask"]}
    width = {"mlp": 64, "wide": 1024}[model]
    rng = np.random.default_rng(1)
    return {"input": rng.standard_normal((1, width)).astype(np.float32)}


def sessions(model: str, layout: Layout) -> list[Any]:
    import onnxruntime as ort

    if layout.shared:
        from onnxruntime.capi import _pybind_state

        _pybind_state.set_global_thread_pool_sizes(layout.threads[0], 1)
    made = []
    for threads in layout.threads:
        options = ort.SessionOptions()
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if layout.shared:
            options.use_per_session_threads = False
        else:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        if not layout.spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if layout.spin_us is not None:
            key = "session.intra_op.spin_duration_us"
            options.add_session_config_entry(key, str(layout.spin_us))
        made.append(
            ort.InferenceSession(
                str(MODELS / f"{model}.onnx"), options, providers=["CPUExecutionProvider"]
            )
        )
    return made


def _feeds(inputs: dict[str, np.ndarray[Any, Any]], batch: int) -> dict[str, np.ndarray[Any, Any]]:
    return {k: np.ascontiguousarray(np.repeat(v, batch, axis=0)) for k, v in inputs.items()}


def _cpu_s() -> float:
    return time.process_time()


def measure(model: str, layout: Layout, batches: list[int], seconds: float) -> dict[str, Any]:
    made = sessions(model, layout)
    adaptive = Adaptive(made[:2], made[2]) if layout.adaptive else None
    callers = made[:2] if adaptive else made

    def call(index: int, f: dict[str, Any]) -> Any:
        if adaptive is not None:
            return adaptive.run(index, f)
        return callers[index].run(None, f)

    inputs = model_inputs(model)
    feeds = _feeds(inputs, 1)
    for _ in range(10):
        call(0, feeds)
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    cpu0 = _cpu_s()
    while len(samples) < 20 or time.perf_counter() < deadline:
        t0 = time.perf_counter_ns()
        call(0, feeds)
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    cpu = (_cpu_s() - cpu0) / (sum(samples) / 1e6)
    q = np.percentile(samples, [50, 99])
    result: dict[str, Any] = {
        "layout": layout.name,
        "p50_us": float(q[0]),
        "p99_us": float(q[1]),
        "lone_cpu_cores": cpu,
        "throughput": {},
    }
    for batch in batches:
        feeds = _feeds(inputs, batch)
        for i in range(len(callers)):
            for _ in range(3):
                call(i, feeds)
        counts: list[int] = []

        def loop(index: int, out: list[int] = counts, f: Any = feeds) -> None:
            calls = 0
            end = time.perf_counter() + seconds
            while calls < 2 or time.perf_counter() < end:
                call(index, f)
                calls += 1
            out.append(calls)

        workers = [threading.Thread(target=loop, args=(i,)) for i in range(len(callers))]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        result["throughput"][batch] = batch * sum(counts) / (time.perf_counter() - t0)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm", choices=("minilm", "mlp", "wide"))
    parser.add_argument("--layout", action="append", help=f"default: all of {', '.join(LAYOUTS)}")
    parser.add_argument("--batch", action="append", type=int)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    batches = args.batch or [1, 2, 4]
    if args.child:
        (name,) = args.layout
        print(json.dumps(measure(args.model, Layout.parse(name), batches, args.seconds)))
        return
    rows = []
    for name in args.layout or LAYOUTS:
        cmd = [sys.executable, __file__, "--child", "--model", args.model, "--layout", name]
        cmd += [f"--batch={b}" for b in batches] + [f"--seconds={args.seconds}"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(f"  {name} done", file=sys.stderr, flush=True)
    header = "| layout | batch-1 p50 ms | p99 ms | lone-call CPU cores | "
    header += " | ".join(f"b={b} /s" for b in batches) + " |"
    print(f"model {args.model}, {args.seconds:g} s per cell")
    print(header)
    print("|" + "---|" * (4 + len(batches)))
    for r in rows:
        cells = " | ".join(f"{r['throughput'][str(b)]:.1f}" for b in batches)
        print(
            f"| {r['layout']} | {r['p50_us'] / 1e3:.3f} | {r['p99_us'] / 1e3:.3f} | "
            f"{r['lone_cpu_cores']:.2f} | {cells} |"
        )
    best = max(max(r["throughput"].values()) for r in rows)
    fastest = min(r["p50_us"] for r in rows)
    print(f"best throughput {best:.1f}/s; best batch-1 p50 {fastest / 1e3:.3f} ms")


if __name__ == "__main__":
    main()
