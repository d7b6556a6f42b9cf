"""Tree models: each library's own predict against the same model on ONNX Runtime, and the
served path against calling the library directly, in one run.

    .venv/bin/python bench/trees.py [--quick] [--seconds S]

1. **Runtimes.** One XGBoost and one LightGBM binary classifier (200 trees, trained here on a
   synthetic imbalanced ``make_classification`` set, 30 features, seed 0). For batch sizes 1
   and 64, single-threaded latency of: XGBoost ``inplace_predict``; LightGBM ``predict``
   (``num_threads``); Treelite GTIL (for reference); the model converted with onnxmltools and
   run by ONNX Runtime (one intra-op thread). This decides ``DEFAULT_RUNTIME`` in
   ``inferd/backends/trees/settings.py``.
2. **Goal check.** Throughput (rows/s) at concurrency 8 — a pool of 8 threads — calling
   ``InferenceServer.infer`` on a ``fil`` model (``predict_proba``, one instance, dynamic
   batching) against the same 8 threads calling the library directly with the same batch size
   and the same thread budget. Shown for the default runtime and for ``runtime: native``.

Figures are only comparable within one run (the machine's cores are shared by everything).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]

FEATURES = 30
TREES = 200
SEED = 0
CONCURRENCY = 8


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def data() -> tuple[Array, Array]:
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=20_000,
        n_features=FEATURES,
        n_informative=12,
        weights=[0.97],
        flip_y=0.01,
        random_state=SEED,
    )
    return x.astype(np.float32), y


def train(workdir: Path, x: Array, y: Array) -> dict[str, Path]:
    import lightgbm as lgb
    import xgboost as xgb

    xgb_path = workdir / "xgboost.json"
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 6, "eta": 0.1, "seed": SEED},
        xgb.DMatrix(x, label=y),
        num_boost_round=TREES,
    )
    booster.save_model(xgb_path)
    lgb_path = workdir / "model.txt"
    lgb.train(
        {"objective": "binary", "num_leaves": 31, "verbose": -1, "seed": SEED},
        lgb.Dataset(x, label=y),
        num_boost_round=TREES,
    ).save_model(lgb_path)
    return {"xgboost_json": xgb_path, "lightgbm": lgb_path}


def latency_us(fn: Callable[[Array], Any], rows: Array, seconds: float) -> float:
    """Median over short rounds of the mean time of one call, in microseconds."""
    for _ in range(20):
        fn(rows)
    rounds: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(rounds) < 5:
        n = 50
        start = time.perf_counter()
        for _ in range(n):
            fn(rows)
        rounds.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(rounds)


def runtime_table(paths: dict[str, Path], x: Array, seconds: float) -> list[tuple[str, ...]]:
    from inferd.backends.trees.libraries import load_tree_file, onnx_scorer

    lines: list[tuple[str, ...]] = []
    for model_type, path in paths.items():
        tree = load_tree_file(path, model_type)
        candidates: dict[str, Callable[[Array], Any]] = {
            "native": tree.native_scorer(1),
            "onnx": onnx_scorer(tree, tree.to_onnx(), 1),
        }
        try:
            import treelite

            if model_type == "lightgbm":
                tl_model = treelite.frontend.load_lightgbm_model(str(path))
            else:
                tl_model = treelite.frontend.load_xgboost_model(str(path))
            candidates["treelite-gtil"] = lambda r, m=tl_model: treelite.gtil.predict(
                m, r, nthread=1
            )
        except ImportError:
            pass
        for batch in (1, 64):
            rows = np.ascontiguousarray(x[:batch])
            timings = {name: latency_us(fn, rows, seconds) for name, fn in candidates.items()}
            best = min(("native", "onnx"), key=lambda k: timings[k])
            lines.append(
                (
                    model_type,
                    str(batch),
                    *(f"{timings[k]:.1f}" for k in ("native", "onnx")),
                    f"{timings.get('treelite-gtil', float('nan')):.1f}",
                    f"{timings['native'] / timings['onnx']:.2f}x",
                    best,
                )
            )
    return lines


def _throughput(call: Callable[[], Any], rows_per_call: int, seconds: float) -> float:
    """Rows per second with CONCURRENCY threads each calling ``call`` in a loop."""
    stop = threading.Event()
    counts = [0] * CONCURRENCY
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            while not stop.is_set():
                call()
                counts[i] += 1
        except BaseException as exc:
            errors.append(exc)

    for _ in range(20):
        call()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(CONCURRENCY)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return sum(counts) * rows_per_call / elapsed


_CONFIG = """
backend: "fil"
max_batch_size: 256
input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {features} ] }} ]
output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
dynamic_batching {{ }}
parameters [
  {{ key: "model_type" value: {{ string_value: "{model_type}" }} }},
  {{ key: "output_class" value: {{ string_value: "true" }} }},
  {{ key: "predict_proba" value: {{ string_value: "true" }} }}{runtime}
]
"""


def write_repository(root: Path, paths: dict[str, Path]) -> list[str]:
    names: list[str] = []
    for model_type, path in paths.items():
        for runtime in ("default", "native"):
            name = f"{model_type}_{runtime}"
            version = root / name / "1"
            version.mkdir(parents=True)
            (version / path.name).write_bytes(path.read_bytes())
            extra = (
                ',\n  { key: "runtime" value: { string_value: "native" } }'
                if runtime == "native"
                else ""
            )
            config = _CONFIG.format(features=FEATURES, model_type=model_type, runtime=extra)
            (root / name / "config.pbtxt").write_text(config)
            names.append(name)
    return names


def goal_table(
    root: Path, paths: dict[str, Path], x: Array, seconds: float
) -> list[tuple[str, ...]]:
    import lightgbm as lgb
    import xgboost as xgb

    from inferd.server.embedded import InferenceServer

    threads = _cores()  # one instance: it gets every core, and so does the direct call
    booster = xgb.Booster(model_file=str(paths["xgboost_json"]))
    booster.set_param({"nthread": threads})
    gbm = lgb.Booster(model_file=str(paths["lightgbm"]))
    direct: dict[str, Callable[[Array], Any]] = {
        "xgboost_json": lambda r: booster.inplace_predict(r),
        "lightgbm": lambda r: gbm.predict(r, num_threads=threads),
    }
    lines: list[tuple[str, ...]] = []
    with InferenceServer(root) as server:
        for model_type in paths:
            for batch in (1, 64):
                rows = np.ascontiguousarray(x[:batch])
                library = _throughput(lambda r=rows, m=model_type: direct[m](r), batch, seconds)
                for runtime in ("default", "native"):
                    name = f"{model_type}_{runtime}"
                    served = _throughput(
                        lambda r=rows, n=name: server.infer(n, {"input__0": r}), batch, seconds
                    )
                    lines.append(
                        (
                            name,
                            str(batch),
                            f"{library:,.0f}",
                            f"{served:,.0f}",
                            f"{served / library:.2f}",
                            "yes" if served >= 0.9 * library else "NO",
                        )
                    )
    return lines


def _print(title: str, header: tuple[str, ...], lines: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short measuring windows")
    parser.add_argument("--seconds", type=float, default=None, help="window per measurement")
    args = parser.parse_args(argv)
    seconds = args.seconds or (0.5 if args.quick else 2.0)
    try:
        import lightgbm  # noqa: F401
        import onnxmltools  # noqa: F401
        import xgboost  # noqa: F401
    except ImportError as exc:
        print(f"skipped: {exc} (pip install 'inferd[trees]' onnxmltools)", file=sys.stderr)
        return 1
    x, y = data()
    print(f"cores: {_cores()}; {TREES} trees, {FEATURES} features, concurrency {CONCURRENCY}")
    with tempfile.TemporaryDirectory(prefix="inferd-bench-trees-") as scratch:
        work = Path(scratch)
        paths = train(work, x, y)
        _print(
            "1. single-thread latency per call (us): library predict vs ONNX Runtime",
            ("model", "batch", "native", "onnx", "treelite", "native/onnx", "faster"),
            runtime_table(paths, x, seconds),
        )
        root = work / "repo"
        write_repository(root, paths)
        _print(
            f"2. rows/s at concurrency {CONCURRENCY}: InferenceServer.infer vs the library "
            "called directly (goal: served >= 0.9 x library)",
            ("served model", "batch", "library", "served", "ratio", ">=0.9"),
            goal_table(root, paths, x, seconds),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
