"""What an ONNX Runtime session gives back when it is dropped: the resident set grown by a
load and a few inferences, what is left after the session is gone and glibc's
``malloc_trim`` ran, and the same for a second load in the same process (is it reused?),
with the CPU memory arena on (the default) and off (the model config's ``enable_mem_arena:
false`` parameter), each in a fresh process, alternating over rounds.

    .venv/bin/python bench/ort_unload_memory.py MODEL.onnx [--rounds 3] [--batch 8] [--seq 128]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import ctypes, gc, json, os, sys, time
import numpy as np
import onnxruntime as ort

path, arena, batch, seq = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
page = os.sysconf("SC_PAGE_SIZE")
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * page
trim = ctypes.CDLL(None).malloc_trim
opts = ort.SessionOptions()
opts.enable_cpu_mem_arena = arena
opts.intra_op_num_threads = 1
r0 = rss()
out = {}
for cycle in (1, 2):  # the second load finds what the first left behind
    t0 = time.perf_counter()
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    load_s = time.perf_counter() - t0
    # a comprehension: no NodeArg outlives it (a NodeArg holds its session: a loop variable left
    # behind kept the whole session resident after "del sess", 143 of 167 MiB)
    feeds = {
        i.name: np.ones((batch, seq), np.int64 if "int64" in i.type else np.float32)
        for i in sess.get_inputs()
    }
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    r1 = rss()
    del sess
    gc.collect()
    trim(0)
    r2 = rss()
    if cycle == 1:
        out = {"grown": r1 - r0, "left": r2 - r0, "load_s": load_s,
               "infer_s": sorted(times)[len(times) // 2]}
    else:
        out["peak2"], out["left2"] = r1 - r0, r2 - r0
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    args = ap.parse_args()
    got: dict[str, list[dict[str, float]]] = {"arena on": [], "arena off": []}
    for _ in range(args.rounds):
        for label, flag in (("arena on", "1"), ("arena off", "0")):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, args.model, flag, str(args.batch), str(args.seq)],
                capture_output=True,
                text=True,
                check=True,
            )
            got[label].append(json.loads(out.stdout))
    mib = 2**20
    for label, runs in got.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        spread = [round(r["left"] / mib) for r in runs]
        print(
            f"{label}: grown {med['grown'] / mib:.0f} MiB, left after drop + malloc_trim "
            f"{med['left'] / mib:.0f} MiB (rounds {spread}); after a second load "
            f"{med['peak2'] / mib:.0f} MiB, after its drop {med['left2'] / mib:.0f} MiB; "
            f"load {med['load_s'] * 1e3:.0f} ms, "
            f"infer {med['infer_s'] * 1e3:.1f} ms (batch {args.batch} x {args.seq}); "
            f"medians of {len(runs)}"
        )


if __name__ == "__main__":
    main()
