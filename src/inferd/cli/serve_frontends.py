"""The ``inferd serve --frontends`` flag: front-end processes that share one engine
(docs/scaling.md)."""

from __future__ import annotations

import argparse

__all__ = ["add_frontends_flag", "frontends_count"]


def add_frontends_flag(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--frontends",
        type=frontends_count,
        default=1,
        metavar="K|auto",
        help="serve HTTP and gRPC from K front-end processes that share the ports "
        "(SO_REUSEPORT), decode requests and hand them to this process's engine over shared "
        "memory, so one model's requests still batch together and statistics and metrics stay "
        "in one place; a front end that dies is restarted. 1: this process serves, as always; "
        "auto: one per core available (CPU affinity and the cgroup's CPU quota) less one for "
        "the engine, 1 below 3 cores. --http-max-connections bounds the connections of all "
        "front ends together (default: 1)",
    )


def frontends_count(text: str) -> int:
    """``--frontends``: a count of front-end processes, or ``auto`` (from the cores)."""
    if text == "auto":
        from inferd.server.frontends.supervisor import auto_frontends

        return auto_frontends()
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count or 'auto', got '{text}'") from None
