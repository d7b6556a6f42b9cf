"""The ``inferd serve`` flags of the OpenAI-compatible API (``/v1``; docs/openai.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from inferd.errors import InvalidArgumentError
from inferd.frontends.openai.limits import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_N,
    DEFAULT_MAX_TOKENS,
)

__all__ = ["add_openai_flags", "openai_fields"]


def add_openai_flags(p: argparse.ArgumentParser) -> None:
    openai = p.add_argument_group(
        "OpenAI-compatible API (/v1 on the HTTP port: models, completions, chat; "
        "see docs/openai.md)"
    )
    openai.add_argument(
        "--openai-port",
        type=int,
        default=None,
        metavar="PORT",
        help="also serve /v1 alone on this port (Triton's OpenAI frontend uses 9000; 0 picks "
        "a free one), with the HTTP address, TLS, limits and access rules; default: off",
    )
    openai.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        metavar="PATH",
        help="a folder holding tokenizer.json and tokenizer_config.json (with its "
        "chat_template) or chat_template.jinja, used for every text model instead of the "
        "files beside its config.pbtxt (local files only; nothing is downloaded)",
    )
    openai.add_argument(
        "--openai-max-tokens",
        type=int,
        default=DEFAULT_MAX_TOKENS,
        metavar="N",
        help="refuse (400) a request whose max_tokens or max_completion_tokens is larger "
        f"(default: {DEFAULT_MAX_TOKENS})",
    )
    openai.add_argument(
        "--openai-max-n",
        type=int,
        default=DEFAULT_MAX_N,
        metavar="N",
        help=f"refuse (400) a request asking for more choices (n) (default: {DEFAULT_MAX_N})",
    )
    openai.add_argument(
        "--openai-max-body-size",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="BYTES",
        help="refuse (400) a /v1 request body that is larger "
        f"(default: {DEFAULT_MAX_BODY_BYTES // (1024 * 1024)} MiB)",
    )


def openai_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The ServerConfig fields the flags give."""
    return {
        "openai_port": args.openai_port,
        "openai_tokenizer": _tokenizer_folder(args.tokenizer),
        "openai_max_tokens": args.openai_max_tokens,
        "openai_max_n": args.openai_max_n,
        "openai_max_body_bytes": args.openai_max_body_size,
    }


def _tokenizer_folder(path: Path | None) -> Path | None:
    if path is None:
        return None
    if not path.is_dir():
        raise InvalidArgumentError(
            f"--tokenizer {path}: not a folder (give the folder holding tokenizer.json and "
            "tokenizer_config.json)"
        )
    return path.resolve()
