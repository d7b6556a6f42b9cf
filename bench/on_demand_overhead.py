"""What an on-demand server holds beyond its baseline and its accounted models.

Two measurements behind docs/multi-model.md ("Why the server's hit ratio stays below the
simulation's"), with the small models of ``bench/many_models_mixed.py``:

- ``--libraries``: in this process, with no server, each runtime's library loads and unloads
  one model 200 times (ONNX Runtime session, XGBoost and LightGBM boosters, one inference each)
  and prints the resident set's growth after 50, 100, 150 and 200 cycles (after
  ``malloc_trim``): what the libraries alone leave behind.
- otherwise: an ``inferd serve`` in on-demand mode over 60 small models with a budget that holds
  a few of them; ``--clients`` closed-loop clients ask for random models, six rounds, and after
  each round the server's resident set, its baseline and its accounted models (from
  ``/metrics``) give what it holds beyond them (the runtimes' libraries and the rest).

    .venv/bin/python bench/on_demand_overhead.py --libraries
    .venv/bin/python bench/on_demand_overhead.py --clients 1
    .venv/bin/python bench/on_demand_overhead.py --clients 8
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import re
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import many_models_mixed as mixed  # this script's folder comes first on sys.path
import numpy as np


def rss_mib(pid: str = "self") -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status)[1]) / 1024  # type: ignore[index]


def library_cycle(kind: str) -> Callable[[], None]:
    x = np.linspace(-1, 1, mixed.FEATURES, dtype=np.float32).reshape(1, mixed.FEATURES)
    if kind == "onnx":
        import onnxruntime as ort

        blob = mixed.onnx_mlp(1024)

        def cycle() -> None:
            s = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
            s.run(None, {s.get_inputs()[0].name: x})

    elif kind == "xgboost":
        import xgboost as xgb

        text = mixed.xgboost_json(150)

        def cycle() -> None:
            b = xgb.Booster()
            b.load_model(bytearray(text))
            b.inplace_predict(x)

    else:
        import lightgbm as lgb

        model = mixed.lightgbm_text(150).decode()

        def cycle() -> None:
            lgb.Booster(model_str=model).predict(x)

    return cycle


def libraries() -> None:
    trim = ctypes.CDLL(None).malloc_trim
    for kind in ("onnx", "xgboost", "lightgbm"):
        cycle = library_cycle(kind)
        cycle()
        gc.collect()
        trim(0)
        base, marks = rss_mib(), []
        for i in range(1, 201):
            cycle()
            if i % 50 == 0:
                gc.collect()
                trim(0)
                marks.append(round(rss_mib() - base, 1))
        print(
            f"{kind}: resident set {base:.0f} MiB; growth after 50/100/150/200 cycles: {marks} MiB"
        )


def served(clients: int, budget: str) -> None:
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    repo = Path(tempfile.mkdtemp(prefix="inferd-overhead-")) / "repo"
    repo.mkdir()
    args = argparse.Namespace(mlp_hidden=1024, trees=150, tree_runtime="native")
    kinds = mixed.build(repo, 60, 0, args)
    names = sorted(kinds)
    flags = ["--model-control-mode", "on-demand", "--model-memory-budget", budget]
    flags += ["--model-min-residency-secs", "0", "--model-load-wait-secs", "60"]
    with mixed.running_server([repo], flags) as server:

        def metrics() -> tuple[float, float]:
            text = urllib.request.urlopen(f"http://{server.metrics_url}/metrics").read().decode()
            resident = re.findall(r"^inferd_model_resident_bytes\{[^}]*\} (\S+)", text, re.M)
            base = re.search(r"^inferd_model_memory_baseline_bytes (\S+)", text, re.M)
            assert base is not None
            return sum(float(v) for v in resident) / 2**20, float(base[1]) / 2**20

        def client(seed: int, requests: int) -> None:
            c = httpclient.InferenceServerClient(server.http_url)
            rng = np.random.default_rng(seed)
            for _ in range(requests):
                name = names[int(rng.integers(len(names)))]
                try:
                    c.infer(name, mixed.inputs(kinds[name]))
                except (InferenceServerException, OSError):  # a 503 or a timeout: no room
                    failed.append(name)

        failed: list[str] = []
        for round_ in range(6):
            threads = [
                threading.Thread(target=client, args=(round_ * 100 + k, 120 // clients))
                for k in range(clients)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            time.sleep(1.0)
            accounted, base = metrics()
            rss = rss_mib(str(server.pid))
            print(
                f"round {round_}: resident set {rss:.0f} MiB, baseline {base:.0f}, accounted "
                f"models {accounted:.0f}, beyond them {rss - base - accounted:.0f} MiB; "
                f"{len(failed)} requests failed so far"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--libraries", action="store_true", help="the libraries alone, no server")
    ap.add_argument("--clients", type=int, default=1, help="concurrent closed-loop clients")
    ap.add_argument(
        "--budget",
        default="340MiB",
        help=(
            "the server's --model-memory-budget (340 MiB: the baseline, the libraries and a few "
            "models; less than 8 clients need beyond the models: their requests then fail, 503)"
        ),
    )
    a: Any = ap.parse_args()
    if a.libraries:
        libraries()
    else:
        served(a.clients, a.budget)


if __name__ == "__main__":
    main()
