"""What a tree model holds once loaded, and what its load costs, on the fil backend's native
runtime: ``--models`` copies of one XGBoost (JSON) and one LightGBM (text) model of
``--trees`` trees on 20 features, each read as the backend does (the file for its shape,
then one scorer), all kept, in one process.

    .venv/bin/python bench/tree_load_memory.py [--models 50] [--trees 150]

Prints, per library, the resident set each copy adds (after ``malloc_trim``), the load time
per copy and the file's size. Compare two versions of the server by running it with each on
``PYTHONPATH`` (``PYTHONPATH=/path/to/other/src``), one after the other.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from inferd.backends.trees.libraries import load_tree_file
from inferd.repository.memory import process_tree_rss, release_free_memory


def _trim() -> None:
    gc.collect()
    release_free_memory()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=int, default=50, help="copies loaded and kept per library")
    ap.add_argument("--trees", type=int, default=150)
    args = ap.parse_args()
    import lightgbm as lgb
    import xgboost as xgb

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 20)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    with tempfile.TemporaryDirectory(prefix="inferd-tree-memory-") as tmp:
        xgb_path, lgb_path = Path(tmp) / "xgboost.json", Path(tmp) / "model.txt"
        params = {"objective": "binary:logistic", "max_depth": 6}
        xgb.train(params, xgb.DMatrix(x, y), args.trees).save_model(str(xgb_path))
        params = {"objective": "binary", "verbose": -1, "num_leaves": 31}
        lgb.train(params, lgb.Dataset(x, y), args.trees).save_model(str(lgb_path))
        for label, path, model_type in (
            ("xgboost", xgb_path, "xgboost_json"),
            ("lightgbm", lgb_path, "lightgbm"),
        ):
            warm = load_tree_file(path, model_type)  # the library's own first-use memory
            warm.native_scorer(2)(x[:4])
            del warm
            _trim()
            base = process_tree_rss(os.getpid())
            kept = []
            started = time.perf_counter()
            for _ in range(args.models):
                tree = load_tree_file(path, model_type)
                scorer = tree.native_scorer(2)
                scorer(x[:4])
                kept.append((tree, scorer))
            elapsed = time.perf_counter() - started
            _trim()
            each = (process_tree_rss(os.getpid()) - base) / args.models
            print(
                f"{label}: {each / 2**20:.2f} MiB each, load {elapsed / args.models * 1e3:.1f} ms "
                f"each ({args.models} copies; the file {path.stat().st_size / 2**20:.2f} MiB)",
                flush=True,
            )
            del kept
            _trim()


if __name__ == "__main__":
    main()
