"""``inferd repo``: model repository utilities."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_repo_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("repo", help="model repository utilities")
    repo_sub = p.add_subparsers(dest="repo_command", metavar="COMMAND", required=True)
    build = repo_sub.add_parser(
        "build-examples",
        help="(re)build the example model repository (simple, simple_int8, simple_string, digits)",
    )
    build.add_argument("--output", type=Path, default=Path("examples/models"), metavar="DIR")
    build.add_argument("--force", action="store_true", help="overwrite existing models")
    build.set_defaults(func=_build_examples)


def _build_examples(args: argparse.Namespace) -> int:
    from inferd.errors import InferdError
    from inferd.examples.build import build_examples

    try:
        built = build_examples(args.output, force=args.force)
    except InferdError as exc:
        print(f"inferd repo build-examples: error: {exc}", file=sys.stderr)
        return 1
    print(f"built {len(built)} model(s) in {args.output}: {', '.join(built)}")
    return 0
