"""What ONNX Runtime's CPU arena keeps after serving, and what shrinking it after each run costs.

For each model, three settings, each in a fresh process, alternating over ``--rounds``:

- ``arena``: ONNX Runtime's default, the arena on and never shrunk;
- ``shrink``: the arena on, shrunk after each run (the run option
  ``memory.enable_memory_arena_shrinkage=cpu:0``, what inferd sets under a memory budget);
- ``no arena``: the config's ``enable_mem_arena: false``.

Each process loads one session (one intra-op thread), runs one small batch (what a load's
warm-up does), then serves a mix of batch shapes for ``--seconds``. Printed: glibc's bytes in
use (``mallinfo2``, blocks mapped apart included) after the load and after serving, and the
mean time of a run of the mix. The models: the ``minilm_embeddings`` example (all-MiniLM-L6-v2,
built once under bench/.work as ``many_models_mixed.py`` builds it) with batches of 1-64 texts
of 8-128 tokens, and the mixed benchmark's tabular MLP with batches of 1-64 rows.

    .venv/bin/python bench/ort_arena_shrinkage.py [--rounds 2] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from many_models_mixed import minilm_source, onnx_mlp  # this script's folder

SETTINGS = ("arena", "shrink", "no arena")
CHILD = r"""
import ctypes, json, sys, time
import numpy as np
import onnxruntime as ort

path, setting, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
libc = ctypes.CDLL("libc.so.6")
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
def in_use():
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd
opts = ort.SessionOptions()
opts.intra_op_num_threads = 1
opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
opts.enable_cpu_mem_arena = setting != "no arena"
run = ort.RunOptions()
if setting == "shrink":
    run.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
base = in_use()
session = ort.InferenceSession(path, opts)
inputs = session.get_inputs()
def feeds(rows, tokens):
    if inputs[0].type == "tensor(int64)":  # the encoder: ids, mask (and type ids)
        return {i.name: np.ones((rows, tokens), np.int64) for i in inputs}
    return {inputs[0].name: np.ones((rows, inputs[0].shape[1]), np.float32)}
session.run(None, feeds(1, 8), run)
loaded = in_use() - base
mix = [feeds(r, t) for r, t in ((1, 8), (8, 32), (2, 128), (32, 16), (64, 128), (4, 64))]
for f in mix:
    session.run(None, f, run)
runs, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    for f in mix:
        session.run(None, f, run)
    runs += len(mix)
elapsed = time.perf_counter() - start
print(json.dumps({"loaded": loaded, "served": in_use() - base, "ms": elapsed / runs * 1e3}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="alternating runs of each setting")
    ap.add_argument("--seconds", type=float, default=3.0, help="serving time per process")
    args = ap.parse_args()
    mib = 1 << 20
    with tempfile.TemporaryDirectory(prefix="inferd-arena-") as tmp:
        mlp = Path(tmp) / "mlp.onnx"
        mlp.write_bytes(onnx_mlp(1024))
        models = {"MiniLM": minilm_source() / "1" / "model.onnx", "tabular MLP": mlp}
        print("| model | setting | in use after the load (MiB) | after serving | ms per run |")
        print("|---|---|---|---|---|")
        for label, path in models.items():
            got: dict[str, list[dict[str, float]]] = {s: [] for s in SETTINGS}
            for _ in range(args.rounds):
                for setting in SETTINGS:
                    out = subprocess.run(
                        [sys.executable, "-c", CHILD, str(path), setting, str(args.seconds)],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    got[setting].append(json.loads(out.stdout.strip().splitlines()[-1]))
            for setting in SETTINGS:
                rows = got[setting]
                loaded = statistics.median(r["loaded"] for r in rows) / mib
                served = statistics.median(r["served"] for r in rows) / mib
                ms = ", ".join(f"{r['ms']:.3f}" for r in rows)
                print(f"| {label} | {setting} | {loaded:.1f} | {served:.1f} | {ms} |", flush=True)


if __name__ == "__main__":
    main()
