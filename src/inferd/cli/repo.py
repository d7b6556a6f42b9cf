"""``inferd repo``: model repository utilities."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_repo_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("repo", help="model repository utilities")
    repo_sub = p.add_subparsers(dest="repo_command", metavar="COMMAND", required=True)
    from inferd.examples.names import EXAMPLE_COUNT

    build = repo_sub.add_parser(
        "build-examples",
        help=f"(re)build the {EXAMPLE_COUNT} example models: all but one into --output, "
        "the TorchScript digits_cnn_torch into --torch-output",
        description=f"(Re)build the {EXAMPLE_COUNT} example models and check each on known "
        "inputs. Training the digits CNNs needs PyTorch; without it they are skipped.",
    )
    build.add_argument(
        "--output",
        type=Path,
        default=Path("examples/models"),
        metavar="DIR",
        help="the repository of the models that serve without PyTorch (default: examples/models)",
    )
    build.add_argument(
        "--torch-output",
        type=Path,
        metavar="DIR",
        help="also build the example that needs PyTorch to serve, digits_cnn_torch, into DIR "
        "(examples/models-torch in a clone)",
    )
    build.add_argument(
        "--llm-output",
        type=Path,
        metavar="DIR",
        help="also train the example language model tiny_llm (served by the llm backend; "
        "needs PyTorch, transformers and tokenizers to build, about a minute on an idle core) "
        "into DIR (examples/models-llm in a clone); one already built from the same seed and "
        "recipe is kept",
    )
    build.add_argument("--force", action="store_true", help="overwrite existing models")
    build.set_defaults(func=_build_examples)


def _build_examples(args: argparse.Namespace) -> int:
    from inferd.errors import InferdError
    from inferd.examples.build import LLM_MODEL_NAMES, TORCH_MODEL_NAMES, build_examples

    try:
        built = build_examples(args.output, force=args.force)
        print(f"built {len(built)} model(s) in {args.output}: {', '.join(built)}")
        if args.torch_output is not None:
            built = build_examples(args.torch_output, force=args.force, names=TORCH_MODEL_NAMES)
            print(f"built {len(built)} model(s) in {args.torch_output}: {', '.join(built)}")
        if args.llm_output is not None:
            built = build_examples(args.llm_output, force=args.force, names=LLM_MODEL_NAMES)
            print(f"built {len(built)} model(s) in {args.llm_output}: {', '.join(built)}")
    except InferdError as exc:
        print(f"inferd repo build-examples: error: {exc}", file=sys.stderr)
        return 1
    return 0
