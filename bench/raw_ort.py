"""Raw ONNX Runtime, no server: the limit every server is compared with.

Each throughput point (a layout of sessions x intra-op threads, and a batch size) is measured
twice, by two loops that share only the session options and the warm-up:

- **the grid** (:func:`grid`), in the bench process: per layout, sessions are built once and
  warmed at each batch size (arena growth happens there); every window runs a fixed number of
  calls per session on its own thread, each thread makes one untimed call first (its own
  buffers), and the clock starts when all threads are past a barrier, so thread start is not
  timed. Each point is the best of ``repeats`` windows (up to twice as many while the best one
  was disturbed), and each window records how many cores other processes took meanwhile
  (:mod:`cpu_share`);
- **the cross-check** (``python bench/raw_ort.py check ...``, :func:`run_check`): a fresh
  process that imports only numpy and onnxruntime and times a plain ``for`` loop of
  ``session.run`` (two plain loops on two threads for two sessions), windows chosen the same way.

The two should agree; when they do not, a window was disturbed (usually by another process:
on 2 cores, one busy process halves a 2-thread session's throughput or worse).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from cpu_share import QuietGate, Share, watch  # bench/ is on sys.path: the script's own folder

LAYOUTS = {"1x1": (1, 1), "1x2": (1, 2), "2x1": (2, 1)}  # name -> (sessions, intra-op threads)
MIN_CALLS = 3  # per session and window, however long one call takes
QUIET_CORES = 0.25  # a window during which other processes took more was disturbed


def session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def feeds(inputs: dict[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    return {k: np.ascontiguousarray(np.repeat(v, batch, axis=0)) for k, v in inputs.items()}


@dataclass
class Point:
    layout: str
    batch: int
    throughput: float  # inferences / s, the best window
    windows: list[float]  # every window's figure
    calls: int  # per session and window
    others_cores: float | None = None  # other processes, during the best window
    busiest: list[str] = field(default_factory=list)


def merge(first: Point, again: Point) -> Point:
    """One point from two measurements of it: every window, the best one's figures."""
    best = first if first.throughput >= again.throughput else again
    return Point(
        best.layout,
        best.batch,
        best.throughput,
        first.windows + again.windows,
        best.calls,
        best.others_cores,
        best.busiest,
    )


def _calls_for(pool: list[Any], data: dict[str, np.ndarray], window_s: float) -> int:
    """Warm every session at this batch size; size a window from the fastest warm call."""
    durations = []
    for s in pool:
        for _ in range(3):
            t0 = time.perf_counter()
            s.run(None, data)
            durations.append(time.perf_counter() - t0)
    return max(MIN_CALLS, math.ceil(window_s / min(durations)))


def _best(windows: list[tuple[float, Share]]) -> tuple[float, Share]:
    return max(windows, key=lambda w: w[0])


def _grid_window(pool: list[Any], data: dict[str, np.ndarray], calls: int) -> float:
    """Calls per second over one window: ``calls`` per session, one thread per session."""
    barrier = threading.Barrier(len(pool) + 1)
    ends: list[float] = []

    def work(s: Any) -> None:
        s.run(None, data)  # untimed: this thread's first call
        barrier.wait()
        for _ in range(calls):
            s.run(None, data)
        ends.append(time.perf_counter())

    threads = [threading.Thread(target=work, args=(s,)) for s in pool]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return len(pool) * calls / (max(ends) - t0)


def _plain_window(pool: list[Any], data: dict[str, np.ndarray], calls: int) -> float:
    """The cross-check's window: a plain loop per session, nothing in between."""

    def loop(s: Any) -> None:
        for _ in range(calls):
            s.run(None, data)

    t0 = time.perf_counter()
    if len(pool) == 1:
        loop(pool[0])
    else:
        with ThreadPoolExecutor(len(pool)) as ex:
            list(ex.map(loop, pool))
    return len(pool) * calls / (time.perf_counter() - t0)


def _measure(
    path: Path,
    inputs: dict[str, np.ndarray],
    layout: str,
    batches: list[int],
    window_s: float,
    repeats: int,
    plain: bool,
) -> list[Point]:
    n_sessions, threads = LAYOUTS[layout]
    pool = [session(path, threads) for _ in range(n_sessions)]
    points = []
    for batch in batches:
        data = feeds(inputs, batch)
        calls = _calls_for(pool, data, window_s)
        windows: list[tuple[float, Share]] = []
        # a window that other processes disturbed may not be the best: up to as many again
        # while the best one so far was disturbed
        while len(windows) < repeats or (
            len(windows) < 2 * repeats and (_best(windows)[1].others_cores or 0) > QUIET_CORES
        ):
            with watch() as share:
                rate = (_plain_window if plain else _grid_window)(pool, data, calls)
            windows.append((rate * batch, share))
        best, share = _best(windows)
        points.append(
            Point(
                layout,
                batch,
                best,
                [round(w[0], 1) for w in windows],
                calls,
                share.others_cores,
                share.busiest,
            )
        )
    del pool  # no session (and no idle intra-op pool) outlives its layout
    gc.collect()
    return points


def grid(
    path: Path,
    inputs: dict[str, np.ndarray],
    layout: str,
    batches: list[int],
    window_s: float,
    repeats: int,
) -> list[Point]:
    """The in-process measurement of one layout at every batch size."""
    return _measure(path, inputs, layout, batches, window_s, repeats, plain=False)


def run_check(
    path: Path,
    inputs_npz: Path,
    layout: str,
    batches: list[int],
    window_s: float,
    repeats: int,
) -> list[Point] | str:
    """The cross-check of one layout, in a fresh process; an error message if it failed."""
    cmd = [sys.executable, __file__, "check", str(path), str(inputs_npz), layout]
    cmd += [f"--batch={b}" for b in batches]
    cmd += [f"--window-s={window_s}", f"--repeats={repeats}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return [Point(**json.loads(line)) for line in done.stdout.splitlines() if line.strip()]


def latency(
    path: Path, inputs: dict[str, np.ndarray], threads: int, calls: int, budget_s: float
) -> dict[str, Any]:
    """Batch-1 latency of sequential calls on one session (after 20 warm-up calls)."""
    s = session(path, threads)
    data = feeds(inputs, 1)
    for _ in range(20):
        s.run(None, data)
    samples = []
    with watch() as share:
        deadline = time.perf_counter() + budget_s
        while len(samples) < calls and time.perf_counter() < deadline:
            t0 = time.perf_counter_ns()
            s.run(None, data)
            samples.append((time.perf_counter_ns() - t0) / 1e3)
    del s
    gc.collect()
    p50, p99 = np.percentile(samples, [50, 99])
    return {
        "mean_us": statistics.fmean(samples),
        "p50_us": float(p50),
        "p99_us": float(p99),
        "samples": len(samples),
        "others_cores": share.others_cores,
    }


# -- a layout's grid and cross-check, as bench/run.py measures it -----------------------------

CHECK_TOLERANCE = 0.15  # grid and cross-check further apart: the cell says so (bench/report.py too)


def note(point: Point, check: Point | None) -> str:
    """What a throughput cell should say about its grid point and cross-check."""
    notes = []
    if check is not None:
        gap = point.throughput / check.throughput - 1
        if abs(gap) > CHECK_TOLERANCE:
            notes.append(f"grid {gap:+.0%} vs cross-check")
    for who, p in (("grid", point), ("cross-check", check)):
        if p is not None and (p.others_cores or 0) > QUIET_CORES:
            busiest = f" ({', '.join(p.busiest)})" if p.busiest else ""
            notes.append(f"{who}: other processes took {p.others_cores:.2f} cores{busiest}")
    return "; ".join(notes)


def disagree(point: Point, check: Point | None) -> bool:
    return check is not None and abs(point.throughput / check.throughput - 1) > CHECK_TOLERANCE


def measure_layout(
    path: Path,
    inputs: dict[str, np.ndarray],
    inputs_npz: Path,
    layout: str,
    batch_sizes: list[int],
    seconds: float,
    repeats: int,
    gate: QuietGate,
) -> tuple[list[Point], dict[int, Point], list[Point] | str]:
    """One layout's grid and cross-check; where they disagree, the lower of the two measures
    its points once more (its windows join the first ones: the best of all is kept)."""
    windows = (seconds, repeats)
    gate.wait()
    points = grid(path, inputs, layout, batch_sizes, *windows)
    gate.wait()
    checked = run_check(path, inputs_npz, layout, batch_sizes, *windows)
    checks = {} if isinstance(checked, str) else {c.batch: c for c in checked}
    pairs = [(p, checks.get(p.batch)) for p in points]
    low_grid = [p.batch for p, c in pairs if disagree(p, c) and c and p.throughput < c.throughput]
    low_check = [p.batch for p, c in pairs if disagree(p, c) and p.batch not in low_grid]
    if low_grid:
        gate.wait()
        again = {p.batch: p for p in grid(path, inputs, layout, low_grid, *windows)}
        points = [merge(p, again[p.batch]) if p.batch in again else p for p in points]
    if low_check:
        gate.wait()
        rechecked = run_check(path, inputs_npz, layout, low_check, *windows)
        for again_check in [] if isinstance(rechecked, str) else rechecked:
            checks[again_check.batch] = merge(checks[again_check.batch], again_check)
    return points, checks, checked


def main() -> None:
    parser = argparse.ArgumentParser(description="the raw ONNX Runtime cross-check")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="plain session.run loops, one JSON line per batch size")
    check.add_argument("model", type=Path)
    check.add_argument("inputs", type=Path, help=".npz of one request's inputs (batch 1)")
    check.add_argument("layout", choices=sorted(LAYOUTS))
    check.add_argument("--batch", type=int, action="append", required=True)
    check.add_argument("--window-s", type=float, default=0.5)
    check.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with np.load(args.inputs) as npz:
        inputs = {k: npz[k] for k in npz.files}
    for point in _measure(
        args.model, inputs, args.layout, args.batch, args.window_s, args.repeats, plain=True
    ):
        print(json.dumps(asdict(point)), flush=True)


if __name__ == "__main__":
    main()
