"""``inferd plan --models``: how many pods a catalogue of models needs when each pod loads
models on demand within a memory budget (:mod:`inferd.tools.scaling.model_cache`)."""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidArgumentError
from inferd.repository.memory import parse_size

__all__ = ["MODEL_FLAGS", "add_models_arguments", "run_models_plan"]

#: the destinations of this mode's flags (every other plan flag is refused with --models)
MODEL_FLAGS = (
    "eviction",
    "models",
    "model_size",
    "model_sizes",
    "zipf",
    "pod_budget",
    "baseline",
    "target_hit_ratio",
    "rate",
    "load_time",
    "max_pods",
)


def add_models_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "many models on a memory budget (--models: size pods for on-demand loading instead of "
        "simulating the HPA; see docs/multi-model.md)"
    )
    g.add_argument(
        "--models",
        type=int,
        metavar="N",
        help="the number of models in the catalogue (default with --model-sizes: the "
        "number of sizes it lists)",
    )
    g.add_argument("--model-size", metavar="SIZE", help="every model's size (e.g. 120MiB)")
    g.add_argument(
        "--model-sizes",
        type=Path,
        metavar="FILE",
        help="measured sizes, most popular model first: the repository index of a server in "
        "on-demand mode (JSON from POST /v2/repository/index, its memory_bytes), a JSON "
        "object of name: bytes, or lines of [name,]SIZE",
    )
    g.add_argument(
        "--zipf",
        type=float,
        default=1.0,
        metavar="S",
        help="popularity law: the model of rank i gets requests in proportion to 1/i^S "
        "(0: all alike; default: 1.0)",
    )
    g.add_argument(
        "--eviction",
        choices=("lru", "cost"),
        default="lru",
        help="each pod's --model-eviction: lru (estimated by Che's approximation) or cost (the "
        "size-aware ceiling: the models of most requests per byte, as many as fit; what cost "
        "approaches when load times are alike) (default: lru)",
    )
    g.add_argument(
        "--pod-budget",
        metavar="SIZE",
        help="each pod's --model-memory-budget, in bytes with an optional unit (e.g. 16GiB)",
    )
    g.add_argument(
        "--baseline",
        default="0",
        metavar="SIZE",
        help="the server's own share of the budget (its inferd_model_memory_baseline_bytes; "
        "default: 0)",
    )
    g.add_argument(
        "--target-hit-ratio",
        type=float,
        default=0.9,
        metavar="R",
        help="the share of requests that should find their model loaded (default: 0.9)",
    )
    g.add_argument(
        "--rate",
        type=float,
        metavar="RPS",
        help="requests per second, every model together: adds each pod's loads per second",
    )
    g.add_argument(
        "--load-time",
        metavar="TIME",
        help="one cold load's duration (e.g. 200ms, 2s; inferd_model_load_duration_seconds); "
        "with --rate, pods are added until none spends more than half its time loading",
    )
    g.add_argument(
        "--max-pods",
        type=int,
        default=1000,
        metavar="N",
        help="the most pods to consider (default: 1000)",
    )


def run_models_plan(args: argparse.Namespace, defaults: dict[str, Any]) -> int:
    from inferd.tools.scaling.model_cache import (
        MAX_LOAD_SHARE,
        ModelFleet,
        plan_pods,
        replicated,
        zipf_popularity,
    )

    others = sorted(
        f"--{dest.replace('_', '-')}"
        for dest, default in defaults.items()
        if dest not in MODEL_FLAGS and dest != "func" and getattr(args, dest, default) != default
    )
    if others:
        raise InvalidArgumentError(
            f"{', '.join(others)} do not apply with --models (it sizes pods for on-demand "
            "loading; the HPA simulation takes --capacity and --traffic instead)"
        )
    sizes = _sizes(args)
    models = len(sizes)
    if args.zipf < 0 or not math.isfinite(args.zipf):
        raise InvalidArgumentError("--zipf must be a number >= 0")
    if args.pod_budget is None:
        raise InvalidArgumentError("--models needs --pod-budget (each pod's memory budget)")
    budget = _size(args.pod_budget, "--pod-budget")
    baseline = 0 if args.baseline.strip() == "0" else _size(args.baseline, "--baseline")
    if baseline >= budget:
        raise InvalidArgumentError("--baseline must be less than --pod-budget")
    if not 0 < args.target_hit_ratio <= 1:
        raise InvalidArgumentError("--target-hit-ratio must be more than 0 and at most 1")
    if args.rate is not None and not args.rate > 0:
        raise InvalidArgumentError("--rate must be more than 0 requests per second")
    load_s = None
    if args.load_time is not None:
        if args.rate is None:
            raise InvalidArgumentError("--load-time needs --rate (loads per second = misses)")
        from inferd.cli.plan_args import seconds

        load_s = seconds(args.load_time, "--load-time")
    if args.max_pods < 1:
        raise InvalidArgumentError("--max-pods must be at least 1")
    fleet = ModelFleet(
        sizes,
        zipf_popularity(models, args.zipf),
        budget - baseline,
        args.rate,
        load_s,
        args.eviction,
    )
    rows, needed = plan_pods(fleet, args.target_hit_ratio, args.max_pods)
    every = replicated(fleet, 1)
    print(
        f"{models} models ({_bytes(float(sizes.min()))} to {_bytes(float(sizes.max()))}, "
        f"{_bytes(float(sizes.sum()))} in all), Zipf s={args.zipf:g}; each pod: a budget of "
        f"{_bytes(budget)} less {_bytes(baseline)} for the server = {_bytes(budget - baseline)} "
        "for models"
    )
    if args.eviction == "lru":
        print("hit ratios: LRU by Che's approximation, requests drawn independently")
    else:
        print(
            "hit ratios: --model-eviction cost's ceiling (the models of most requests per byte "
            "that fit), requests drawn independently"
        )
    if rows[0].too_big:
        print(f"{rows[0].too_big} models are larger than a pod's room: never loaded (refused)")
    print(
        f"\nevery pod serving every model: hit ratio {every.hit_ratio:.3f} however many pods "
        f"({every.resident_models:.1f} models resident per pod)"
    )
    print("each model's requests sent to one pod (by model name):\n")
    header = ["pods", "hit ratio", "models resident"]
    if args.rate is not None:
        header.append("loads/s per pod")
    if load_s is not None:
        header.append("time loading")
    table = [header]
    for row in rows:
        cells = [str(row.pods), f"{row.hit_ratio:.3f}", f"{row.resident_models:.1f}"]
        if row.loads_per_s is not None:
            cells.append(f"{row.loads_per_s:.2f}")
        if row.load_share is not None:
            cells.append(f"{row.load_share:.0%}")
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    limit = f"a hit ratio >= {args.target_hit_ratio:g}"
    if load_s is not None:
        limit += f" and at most {MAX_LOAD_SHARE:.0%} of a pod's time loading"
    if needed is None:
        print(f"\nno number of pods up to {args.max_pods} gives {limit} (raise --max-pods)")
        return 1
    print(f"\npods needed for {limit}: {needed}")
    return 0


def _size(text: str, flag: str) -> int:
    if text.strip().endswith("%"):
        raise InvalidArgumentError(f"{flag} '{text}': give bytes (e.g. 16GiB), not a share")
    return parse_size(text.strip(), flag)


def _bytes(n: float) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _sizes(args: argparse.Namespace) -> np.ndarray[Any, np.dtype[np.float64]]:
    if (args.model_size is None) == (args.model_sizes is None):
        raise InvalidArgumentError("--models needs one of --model-size and --model-sizes")
    if args.model_size is not None:
        if args.models is None or args.models < 1:
            raise InvalidArgumentError("--models must be at least 1")
        size = _size(args.model_size, "--model-size")
        return np.full(args.models, float(size))
    listed = _read_sizes(args.model_sizes)
    if args.models is not None and args.models != len(listed):
        raise InvalidArgumentError(
            f"--models {args.models} but {args.model_sizes} lists {len(listed)} sizes"
        )
    return np.array(listed, dtype=np.float64)


def _read_sizes(path: Path) -> list[float]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgumentError(f"{path}: cannot read ({exc.strerror})") from exc
    where = str(path)
    if text.lstrip().startswith(("[", "{")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(f"{where}: not valid JSON ({exc})") from exc
        sizes = _json_sizes(data, where)
    else:
        sizes = []
        for number, line in enumerate(text.splitlines(), 1):
            fields = [f for f in re.split(r"[,\s]+", line.split("#", 1)[0].strip()) if f]
            if not fields:
                continue
            if len(fields) > 2:
                raise InvalidArgumentError(f"{where}:{number}: expected [name,]SIZE")
            sizes.append(float(_size(fields[-1], f"{where}:{number}")))
    if not sizes:
        raise InvalidArgumentError(f"{where}: lists no model sizes")
    return sizes


def _json_sizes(data: object, where: str) -> list[float]:
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list):
        items = []
        for entry in data:
            if not isinstance(entry, dict) or "name" not in entry:
                raise InvalidArgumentError(f"{where}: expected repository index entries")
            if "memory_bytes" not in entry:
                raise InvalidArgumentError(
                    f"{where}: model '{entry['name']}' has no memory_bytes (it was never "
                    "loaded on demand: send it one request first)"
                )
            items.append((entry["name"], entry["memory_bytes"]))
    else:
        raise InvalidArgumentError(f"{where}: expected a JSON list or object")
    seen: dict[str, float] = {}
    for name, value in items:
        try:
            size = float(value)
        except (TypeError, ValueError):
            size = -1.0
        if not size > 0:
            raise InvalidArgumentError(f"{where}: model '{name}' has no size in bytes: {value!r}")
        seen.setdefault(str(name), size)  # a model's versions share one entry
    return list(seen.values())
