"""``inferd serve``'s on-demand loading flags: the memory budget, pins and residency."""

from __future__ import annotations

import argparse
from typing import Any

from inferd.repository.eviction import POLICIES
from inferd.repository.memory import parse_budget

__all__ = ["add_on_demand_flags", "on_demand_fields"]


def add_on_demand_flags(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group(
        "on-demand loading (--model-control-mode=on-demand; see docs/multi-model.md)"
    )
    group.add_argument(
        "--model-memory-budget",
        metavar="SIZE|PERCENT",
        help="the memory the server and its models may hold: bytes with an optional unit "
        "(2GiB, 512MiB, 1.5G) or a share of the container's memory limit read from cgroups "
        "(60%%; the machine's memory where no limit is set). Before a load would exceed it, "
        "idle models are unloaded, in the order --model-eviction gives (default: no budget, "
        "nothing is unloaded)",
    )
    group.add_argument(
        "--model-pin",
        action="append",
        default=[],
        metavar="NAME",
        help="a model loaded at start and never unloaded to make room; repeatable (needs "
        "--model-memory-budget)",
    )
    group.add_argument(
        "--model-eviction",
        choices=POLICIES,
        default=None,
        help="which idle models leave first to make room: 'lru', the least recently used; "
        "'cost', the least worth keeping per byte (recent requests, decayed with a 30 s "
        "half-life, x the model's measured load time / its size), so many small busy models "
        "outstay a large one and slow loads are repeated less (needs --model-memory-budget; "
        "default: cost)",
    )
    group.add_argument(
        "--model-min-residency-secs",
        "--model-min-residency-s",
        dest="model_min_residency_secs",
        type=float,
        default=None,
        metavar="SECONDS",
        help="a model stays loaded at least this long before it may be unloaded to make room, "
        "so two busy models that do not fit together cannot unload each other on every "
        "request; with --model-eviction cost, only a model loaded again less than this long "
        "after its eviction (one that thrashes) and asked for at least twice per this long "
        "at its recent rate, and only against a load that cannot fit without it (one that "
        "other idle models can make room for ranks it with them); with lru every model "
        "(needs --model-memory-budget; default: 10)",
    )
    group.add_argument(
        "--model-load-wait-secs",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long a request waits for its model to load on demand (or for room to load "
        "it) before a 503 says it is loading; the load goes on (default: 30)",
    )
    group.add_argument(
        "--model-load-retry-secs",
        type=float,
        default=None,
        metavar="SECONDS",
        help="after a model's load fails, its requests are refused with that error (503) for "
        "this long before a request tries the load again, so a broken model does not make "
        "every request pay for a load (0: try on every request; default: 10)",
    )


def on_demand_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The ServerConfig fields the flags give (those not given keep their defaults, so the
    config can tell a flag given outside on-demand mode)."""
    fields: dict[str, Any] = {"model_pins": tuple(dict.fromkeys(args.model_pin))}
    if args.model_memory_budget is not None:
        fields["model_memory_budget"] = parse_budget(args.model_memory_budget)
    if args.model_min_residency_secs is not None:
        fields["model_min_residency_s"] = args.model_min_residency_secs
    if args.model_load_wait_secs is not None:
        fields["model_load_wait_s"] = args.model_load_wait_secs
    if args.model_load_retry_secs is not None:
        fields["model_load_retry_s"] = args.model_load_retry_secs
    if args.model_eviction is not None:
        fields["model_eviction"] = args.model_eviction
    return fields
