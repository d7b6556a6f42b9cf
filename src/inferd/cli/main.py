"""Entry point of the ``inferd`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from inferd import __version__
from inferd.cli.analyze import add_analyze_parser
from inferd.cli.batch import add_batch_parser
from inferd.cli.distill import add_distill_parser
from inferd.cli.model import add_model_parser
from inferd.cli.monitor import add_monitor_parser
from inferd.cli.optimize import add_optimize_parser
from inferd.cli.perf import add_perf_parser
from inferd.cli.plan import add_plan_parser
from inferd.cli.repo import add_repo_parser
from inferd.cli.rollout import add_rollout_parser
from inferd.cli.serve import add_serve_parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inferd",
        description="inferd: a fast, Triton-compatible inference server and toolkit.",
    )
    parser.add_argument("--version", action="version", version=f"inferd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_serve_parser(sub)
    add_repo_parser(sub)
    add_perf_parser(sub)
    add_analyze_parser(sub)
    add_optimize_parser(sub)
    add_monitor_parser(sub)
    add_model_parser(sub)
    add_rollout_parser(sub)
    add_distill_parser(sub)
    add_plan_parser(sub)
    add_batch_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
