"""Many models of different sizes under one memory budget: the issue's mix, goals and policies.

Builds a repository of ``--small`` tabular models (a third each: ONNX MLPs with a few MB of
weights, XGBoost and LightGBM JSON models on the ``fil`` backend, copies of one trained model
under distinct names) and ``--large`` copies of the ``minilm_embeddings`` example (all-MiniLM-L6-v2
as ONNX, built once with ``python -m inferd.examples.embedding_models`` under bench/.work), then:

1. **sizes**: every model requested once on a server with no eviction: each model's measured
   size, the server's baseline, each kind's first load;
2. **all loaded**: a server that loaded every model at start, driven by the traffic below: the
   reference latency (p99) with nothing evicted;
3. **budget**, for each ``--policies`` policy, alternating over ``--rounds`` rounds: a budget of
   the baseline plus ``--share`` of the sum of the measured sizes; ``--clients`` closed-loop
   clients send Zipf(``--zipf``) traffic (popularity ranks shuffled over all models with a fixed
   seed) for ``--warmup-s`` (not counted), then ``--measure-s`` (counted), then the popularity
   shifts (a second shuffle) for ``--shift-s``.

A request is a *hit* when its model was resident: no load of that model ended while it was
under way (the server logs each load's end). Printed beside each goal: failed requests, the
resident set's largest 100 ms sample against the budget, the hit ratio, the p99 of hits against
the all-loaded p99, cold-load p50/p99 per kind of model, and after the shift how long until the
new most popular models (``--hot`` of them) were all resident.

    .venv/bin/python bench/many_models_mixed.py            # the issue's run: 300 + 10 models
    .venv/bin/python bench/many_models_mixed.py --quick    # a smoke run: 12 + 1 models, seconds
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from many_models_analysis import (  # this script's folder
    Result,
    Traffic,
    analyse,
    events,
    load_starts,
    pct,
)

from inferd.repository.memory import process_tree_rss
from inferd.testing import ServerProcess, running_server

WORK = Path(__file__).resolve().parent / ".work" / "many_models"
FEATURES = 20
KINDS = ("onnx", "xgboost", "lightgbm", "minilm")
ONNX_CONFIG = """
name: "{name}"
backend: "{backend}"
max_batch_size: 64
input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {features} ] }} ]
output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
TREE_CONFIG = (
    ONNX_CONFIG
    + """parameters [
  {{ key: "model_type" value: {{ string_value: "{model_type}" }} }},
  {{ key: "output_class" value: {{ string_value: "true" }} }},
  {{ key: "predict_proba" value: {{ string_value: "true" }} }},
  {{ key: "runtime" value: {{ string_value: "{runtime}" }} }}
]
"""
)


# -- the repository ------------------------------------------------------------------------------


def _data() -> tuple[Any, Any]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(4000, FEATURES)).astype(np.float32)
    y = (x[:, :4].sum(axis=1) + 0.3 * rng.normal(size=4000) > 0).astype(np.int32)
    return x, y


def onnx_mlp(hidden: int) -> bytes:
    """A tabular MLP (features -> hidden -> hidden/2 -> 2, softmax): a few MB of weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    shapes = [(FEATURES, hidden), (hidden, hidden // 2), (hidden // 2, 2)]
    inits, nodes, prev = [], [], "input__0"
    for k, (a, b) in enumerate(shapes):
        inits.append(
            numpy_helper.from_array((rng.normal(size=(a, b)) * 0.05).astype("f4"), f"w{k}")
        )
        inits.append(numpy_helper.from_array(np.zeros(b, np.float32), f"b{k}"))
        out = f"h{k}"
        nodes.append(helper.make_node("Gemm", [prev, f"w{k}", f"b{k}"], [out]))
        if k < len(shapes) - 1:
            nodes.append(helper.make_node("Relu", [out], [f"r{k}"]))
            out = f"r{k}"
        prev = out
    nodes.append(helper.make_node("Softmax", [prev], ["output__0"], axis=1))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("input__0", TensorProto.FLOAT, ["b", FEATURES])],
        [helper.make_tensor_value_info("output__0", TensorProto.FLOAT, ["b", 2])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def xgboost_json(trees: int) -> bytes:
    import xgboost as xgb

    x, y = _data()
    params = {"objective": "binary:logistic", "max_depth": 6, "eta": 0.1, "seed": 7}
    booster = xgb.train(params, xgb.DMatrix(x, label=y), num_boost_round=trees)
    return bytes(booster.save_raw("json"))


def lightgbm_text(trees: int) -> bytes:
    import lightgbm as lgb

    x, y = _data()
    params = {"objective": "binary", "num_leaves": 31, "verbose": -1, "seed": 7}
    booster = lgb.train(params, lgb.Dataset(x, label=y), num_boost_round=trees)
    return str(booster.model_to_string()).encode()


def minilm_source() -> Path:
    """The ``minilm_embeddings`` example, built once (it needs PyTorch and the weights
    package; a few minutes) and kept under bench/.work."""
    target = WORK / "minilm" / "minilm_embeddings"
    if not (target / "config.pbtxt").exists():
        (WORK / "minilm").mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "inferd.examples.embedding_models"]
        subprocess.run([*cmd, "--output", str(WORK / "minilm"), "--force"], check=True)
    return target


def build(repo: Path, small: int, large: int, args: argparse.Namespace) -> dict[str, str]:
    """The repository; returns each model's kind."""
    kinds: dict[str, str] = {}
    blobs = {
        "onnx": ("1/model.onnx", onnx_mlp(args.mlp_hidden)),
        "xgboost": ("1/xgboost.json", xgboost_json(args.trees)),
        "lightgbm": ("1/model.txt", lightgbm_text(args.trees)),
    }
    for k in range(small):
        kind = KINDS[k % 3]
        name = f"{kind}_{k:03d}"
        path, blob = blobs[kind]
        (repo / name / "1").mkdir(parents=True)
        (repo / name / path).write_bytes(blob)
        if kind == "onnx":
            config = ONNX_CONFIG.format(name=name, backend="onnxruntime", features=FEATURES)
        else:
            model_type = "xgboost_json" if kind == "xgboost" else "lightgbm"
            config = TREE_CONFIG.format(
                name=name,
                backend="fil",
                features=FEATURES,
                model_type=model_type,
                runtime=args.tree_runtime,
            )
        (repo / name / "config.pbtxt").write_text(config)
        kinds[name] = kind
    if large:
        source = minilm_source()
        config = (source / "config.pbtxt").read_text()
        for k in range(large):
            name = f"minilm_{k:02d}"
            (repo / name / "1").mkdir(parents=True)
            # hard links: the files count once on disk, the server still loads each copy
            os.link(source / "1" / "model.onnx", repo / name / "1" / "model.onnx")
            os.link(source / "tokenizer.json", repo / name / "tokenizer.json")
            text = re.sub(r'^name: ".*"$', f'name: "{name}"', config, flags=re.MULTILINE)
            (repo / name / "config.pbtxt").write_text(text)
            kinds[name] = "minilm"
    return kinds


# -- traffic ---------------------------------------------------------------------------------------


def inputs(kind: str) -> list[Any]:
    if kind == "minilm":
        text = httpclient.InferInput("text", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"which model answers this request?"]], dtype=object))
        return [text]
    x = httpclient.InferInput("input__0", [1, FEATURES], "FP32")
    x.set_data_from_numpy(np.linspace(-1, 1, FEATURES, dtype=np.float32).reshape(1, FEATURES))
    return [x]


def popularity(names: list[str], zipf: float, seed: int) -> tuple[list[str], Any]:
    """The models in popularity order (a seeded shuffle) and their request probabilities."""
    order = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    weights = 1.0 / np.arange(1, len(names) + 1) ** zipf
    return order, weights / weights.sum()


def drive(
    server: ServerProcess,
    kinds: dict[str, str],
    phases: list[tuple[float, list[str], Any]],
    clients: int,
    seed: int,
) -> Traffic:
    """``clients`` closed-loop clients; each phase: (seconds, popularity order, weights)."""
    out = Traffic()
    lock = threading.Lock()
    started = time.monotonic()
    ends = np.cumsum([p[0] for p in phases]) + started
    made = {kind: inputs(kind) for kind in set(kinds.values())}

    def client_loop(k: int) -> None:
        rng = np.random.default_rng(seed * 1000 + k)
        with httpclient.InferenceServerClient(
            server.http_url, network_timeout=300, connection_timeout=300
        ) as client:
            while (now := time.monotonic()) < ends[-1]:
                phase = int(np.searchsorted(ends, now, side="right"))
                _, order, weights = phases[phase]
                name = order[int(rng.choice(len(order), p=weights))]
                t0 = time.time()
                try:
                    client.infer(name, made[kinds[name]])
                except Exception as exc:  # counted, the run goes on
                    with lock:
                        out.failures.append(f"{name}: {exc}")
                    continue
                with lock:
                    out.requests.append((name, t0, time.time()))

    threads = [threading.Thread(target=client_loop, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    next_accounted = time.monotonic()
    while any(t.is_alive() for t in threads):
        out.rss.append(process_tree_rss(server.pid))
        out.rss_at.append(time.time())
        if time.monotonic() >= next_accounted:  # what the server counts, beside what it holds
            next_accounted += 0.5
            try:
                held = int(metric(server, "inferd_model_resident_bytes"))
            except OSError:
                held = -1
            out.accounted.append((process_tree_rss(server.pid), held))
        time.sleep(0.1)
    for t in threads:
        t.join()
    return out


# -- reading the server ------------------------------------------------------------------------


def metric(server: ServerProcess, name: str) -> float:
    # only the one metric: a whole exposition of 310 models takes the server 80-200 ms to
    # render (bench/metrics_scrape.py), twice a second here
    url = f"http://{server.metrics_url}/metrics?name[]={name}"
    with urllib.request.urlopen(url, timeout=30) as reply:
        text = reply.read().decode()
    total = 0.0
    for match in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE):
        total += float(match.group(1))
    return total


# -- the run -------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--small", type=int, default=300, help="tabular models (ONNX, XGBoost, LightGBM)"
    )
    ap.add_argument("--large", type=int, default=10, help="MiniLM-sized models (0: none)")
    ap.add_argument("--mlp-hidden", type=int, default=1024, help="the ONNX MLPs' width")
    ap.add_argument("--trees", type=int, default=150, help="trees of the XGBoost/LightGBM models")
    ap.add_argument(
        "--tree-runtime",
        choices=("native", "onnx"),
        default="native",
        help="the fil backend's runtime for the tree models (onnx converts each model at its "
        "load: seconds per model of this size on a busy machine)",
    )
    ap.add_argument(
        "--share", type=float, default=0.2, help="share of the models' bytes the budget holds"
    )
    ap.add_argument(
        "--budget-mib",
        type=float,
        help="this budget instead of the one computed from the sizes measured (to compare two "
        "versions of the server, whose sizes differ, at the same memory)",
    )
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--warmup-s", type=float, default=20.0)
    ap.add_argument("--measure-s", type=float, default=40.0)
    ap.add_argument("--shift-s", type=float, default=20.0)
    ap.add_argument("--hot", type=int, default=10, help="the new most popular models to wait for")
    ap.add_argument(
        "--policies",
        default="lru,cost",
        help="--model-eviction values to compare, each optionally with the server's "
        "--model-load-thread-count after a colon (cost:1,cost:4: serial against parallel loads) "
        "and environment variables of the server after a plus (cost:4+MALLOC_ARENA_MAX=2)",
    )
    ap.add_argument("--rounds", type=int, default=2, help="alternating runs of each policy")
    ap.add_argument("--min-residency-s", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 12 + 1 models, seconds each")
    args = ap.parse_args()
    if args.quick:
        args.small, args.large, args.trees, args.mlp_hidden = 12, min(args.large, 1), 20, 256
        args.clients, args.warmup_s, args.measure_s, args.shift_s = 4, 5.0, 5.0, 5.0
        args.hot, args.rounds = 3, 1
    policies = args.policies.split(",")
    mib = 1 << 20

    with tempfile.TemporaryDirectory(prefix="inferd-many-mixed-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        kinds = build(repo, args.small, args.large, args)
        names = sorted(kinds)
        on_demand = ["--model-control-mode", "on-demand", "--log-verbose", "0"]
        on_demand += ["--model-load-wait-secs", "300"]

        # 1. sizes: every model once, no eviction
        with running_server([repo], [*on_demand, "--model-memory-budget", "100%"]) as server:
            with httpclient.InferenceServerClient(server.http_url, network_timeout=300) as c:
                for name in names:
                    c.infer(name, inputs(kinds[name]))
                index = {e["name"]: e for e in c.get_model_repository_index()}
            baseline = int(metric(server, "inferd_model_memory_baseline_bytes"))
            first_loads, _ = events(server.log())
            all_rss = process_tree_rss(server.pid)
        sizes = {n: int(index[n]["memory_bytes"]) for n in names}
        # the first model of each kind also measured its runtime's libraries, which stay
        # loaded: the server's share, not the model's (the server finds that out at its first
        # eviction); the model counts as its kind's median
        libraries = 0
        for kind in KINDS:
            mine = [n for _, n, _ in first_loads if kinds[n] == kind]
            if len(mine) > 1:
                median = int(np.median([sizes[n] for n in mine[1:]]))
                libraries += max(0, sizes[mine[0]] - median)
                sizes[mine[0]] = min(sizes[mine[0]], median)
        total = sum(sizes.values())
        # room for a fifth of the bytes, and at least for the largest model with a margin
        room = max(int(total * args.share), int(max(sizes.values()) * 1.25))
        budget = baseline + libraries + room
        if args.budget_mib is not None:
            budget = int(args.budget_mib * mib)
            room = budget - baseline - libraries

        order_a, weights = popularity(names, args.zipf, args.seed)
        order_b, _ = popularity(names, args.zipf, args.seed + 1)
        phases = [
            (args.warmup_s, order_a, weights),
            (args.measure_s, order_a, weights),
            (args.shift_s, order_b, weights),
        ]

        # 2. everything loaded, no budget: the reference latency
        with running_server(
            [repo], [*on_demand, "--load-model", "*"], startup_timeout_s=900
        ) as server:
            t_start = time.time()
            ref = drive(server, kinds, phases[:2], args.clients, args.seed)
        window = (t_start + args.warmup_s, t_start + args.warmup_s + args.measure_s)
        ref_lat = [t1 - t0 for _, t0, t1 in ref.requests if window[0] <= t0 < window[1]]
        ref_p99 = pct(ref_lat, 99)

        # 3. each policy within the budget, alternating
        results: list[Result] = []
        for _ in range(args.rounds):
            for policy in policies:
                flags = [*on_demand, "--model-memory-budget", str(budget)]
                flags += ["--model-min-residency-secs", str(args.min_residency_s)]
                spec, *settings = policy.split("+")  # "+KEY=VALUE": the server's environment
                env = dict(kv.split("=", 1) for kv in settings)
                name, _, threads = spec.partition(":")
                flags += ["--model-eviction", name]
                if threads:
                    flags += ["--model-load-thread-count", threads]
                with running_server([repo], flags, env=env) as server:
                    t_start = time.time()
                    traffic = drive(server, kinds, phases, args.clients, args.seed)
                    counters = (
                        int(metric(server, "inferd_model_loads_total")),
                        int(metric(server, "inferd_model_evictions_total")),
                        int(metric(server, "inferd_model_eviction_thrash_total")),
                    )
                    log = server.log()
                label = re.sub(r"[^\w.-]", "-", policy)
                (WORK / f"server-{label}.log").write_text(log)
                w = (t_start + args.warmup_s, t_start + args.warmup_s + args.measure_s)
                shift = (w[1], order_b[: args.hot])
                result = analyse(policy, traffic, log, kinds, w, shift, budget, counters)
                result.all_p99_s = ref_p99
                result.starts = load_starts(log, kinds)
                results.append(result)
                print(
                    f"  [{policy}] requests {result.requests}, hit ratio {result.hit_ratio:.3f}, "
                    f"hit p99 {result.hit_p99_s * 1e3:.1f} ms, failed {result.failed}, "
                    f"shift {result.shift_s:.1f} s",
                    flush=True,
                )

    by_kind_size: dict[str, list[int]] = {}
    for n in names:
        by_kind_size.setdefault(kinds[n], []).append(sizes[n])
    print(
        f"models: {args.small} small + {args.large} MiniLM; measured sizes: "
        + ", ".join(
            f"{k} {len(v)} x median {np.median(v) / mib:.1f} MiB"
            for k, v in sorted(by_kind_size.items())
        )
        + f"; all {total / mib:.0f} MiB (all loaded: resident set {all_rss / mib:.0f} MiB)"
    )
    print(
        f"budget: {budget / mib:.0f} MiB = baseline {baseline / mib:.0f} MiB + runtimes' "
        f"libraries {libraries / mib:.0f} MiB + {room / mib:.0f} MiB for models "
        f"({room / total:.2f} of their bytes); {args.clients} clients, Zipf({args.zipf}), warm-up "
        f"{args.warmup_s:g} s, measured {args.measure_s:g} s, shifted {args.shift_s:g} s, "
        f"min residency {args.min_residency_s:g} s"
    )
    first = {k: [s for _, n, s in first_loads if kinds[n] == k] for k in KINDS}
    print(
        "first loads (nothing else loaded): "
        + ", ".join(
            f"{k} p50 {pct(v, 50) * 1e3:.0f} / p99 {pct(v, 99) * 1e3:.0f} ms"
            for k, v in first.items()
            if v
        )
    )
    print(f"all loaded, no budget: p99 {ref_p99 * 1e3:.1f} ms ({len(ref.failures)} failed)")
    beyond = [(r - held - baseline) / mib for r, held in ref.accounted if held >= 0]
    if beyond:
        print(
            "  its resident set beyond its baseline and models under the traffic: median "
            f"{np.median(beyond):.0f}, min {min(beyond):.0f}, max {max(beyond):.0f} MiB"
        )
    for policy in policies:
        mine = [r for r in results if r.policy == policy]
        print(f"\n--model-eviction {policy} ({len(mine)} runs; goal: measured, each run)")
        print(f"  0 failed requests:                 {[r.failed for r in mine]}")
        print(
            f"  resident set <= budget {budget / mib:.0f} MiB:   max "
            f"{[round(r.rss_max / mib) for r in mine]} MiB; samples over "
            f"{[f'{r.over_budget_samples}/{r.samples}' for r in mine]}"
        )
        print(f"  hit ratio >= 0.9:                  {[round(r.hit_ratio, 3) for r in mine]}")
        print(
            f"  hit p99 <= 1.2 x {ref_p99 * 1e3:.1f} ms:          "
            f"{[round(r.hit_p99_s * 1e3, 1) for r in mine]} ms "
            f"({[round(r.hit_p99_s / ref_p99, 2) for r in mine]} x)"
        )
        over = [(r, a) for x in mine for r, a in x.accounted if r > budget and a >= 0]
        if over:
            print(
                f"  in the {len(over)} half-second samples over budget: resident set median "
                f"{np.median([r for r, _ in over]) / mib:.0f} MiB; baseline + accounted models "
                f"median {np.median([baseline + a for _, a in over]) / mib:.0f} MiB"
            )
        during: dict[str, int] = {}
        for x in mine:
            for k, v in x.over_during.items():
                during[k] = during.get(k, 0) + v
        print(
            "  samples over budget while loading: "
            + ", ".join(f"{k} {v}" for k, v in during.items())
            + " (minilm: a MiniLM load under way; small: small models' loads only)"
        )
        when = [t for x in mine for t in x.over_at]
        if when:
            print(f"  samples over budget at (UTC): {', '.join(when[:12])}")
        gaps = [r - baseline - a for x in mine for r, a in x.accounted if a >= 0]
        if gaps:
            print(
                f"  resident set - baseline - accounted models: median {np.median(gaps) / mib:.0f}"
                f", max {max(gaps) / mib:.0f}, min {min(gaps) / mib:.0f} MiB"
            )
        held = [r for x in mine for r, _ in x.accounted]
        if held:
            print(
                f"  resident set, half-second samples: median {np.median(held) / mib:.0f}, p10 "
                f"{pct(held, 10) / mib:.0f}, p90 {pct(held, 90) / mib:.0f} MiB; misses by kind "
                f"{[dict(sorted(x.misses.items())) for x in mine]}"
            )
        print(f"  new top {args.hot} resident <= 10 s:     {[round(r.shift_s, 1) for r in mine]} s")
        print(
            f"  requests counted: {[r.requests for r in mine]}; loads "
            f"{[r.loads for r in mine]}, evictions {[r.evictions for r in mine]}, residency "
            f"refusals {[r.thrash for r in mine]}; misses per load begun in the measured "
            f"window {[round(r.misses_per_load, 2) for r in mine]}"
        )
        for r in mine:
            print(f"  {r.starts}")
        cold: dict[str, list[float]] = {}
        for r in mine:
            for k, v in r.cold.items():
                cold.setdefault(k, []).extend(v)
        print(
            "  cold loads: "
            + ", ".join(
                f"{k} p50 {pct(v, 50) * 1e3:.0f} / p99 {pct(v, 99) * 1e3:.0f} ms ({len(v)})"
                for k, v in sorted(cold.items())
            )
        )
    for r in results:
        for line in r.failures[:3]:
            print(f"  failure ({r.policy}):", line)


if __name__ == "__main__":
    main()
