"""``python -m inferd.examples.tiny_llm``: train the example language model into a folder."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from inferd.errors import InferdError
from inferd.examples.build import build_examples
from inferd.examples.tiny_llm import LLM_MODEL_NAMES

_log = logging.getLogger("inferd.examples.tiny_llm")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferd.examples.tiny_llm",
        description="Train the example language model tiny_llm (a small Llama and its BPE "
        "tokenizer, on inferd's own docstrings and docs) into a model repository for the llm "
        "backend, printing the training loss. Needs torch, transformers and tokenizers.",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("examples/models-llm"),
        metavar="DIR",
        help="repository folder to write into (default: examples/models-llm)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="train again even when a tiny_llm of the same seed and recipe is there",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")
    args = parser.parse_args(argv)

    if not args.quiet:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        _log.addHandler(handler)
        _log.setLevel(logging.INFO)
    try:
        build_examples(
            args.output, force=args.force, progress=not args.quiet, names=LLM_MODEL_NAMES
        )
    except InferdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
