"""``inferd model``: a served model's versions: status, rollback and unpin.

See docs/rollout-versions.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.cli.admin_token import read_admin_token
from inferd.cli.perf_connection import add_connection_arguments, connection_from_args
from inferd.errors import InferdError, InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from inferd.client.admin import AdminClient


def add_model_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "model",
        help="a served model's versions: status, rollback, unpin",
        description="Act on the versions a running inferd server serves, over its HTTP "
        "API. 'rollback' and 'unpin' belong to the rollout API group: the server refuses them "
        "(403) unless it has an admin token, which must then be given here "
        "(--admin-token-file or INFERD_ADMIN_TOKEN); 'status' reads the model-repository "
        "group's index. Give any --http-restricted-api header the server expects with -H.",
    )
    model_sub = p.add_subparsers(dest="model_command", metavar="COMMAND", required=True)
    rollback = model_sub.add_parser(
        "rollback",
        help="make an earlier version the model's default version, and pin it there",
        description=textwrap.fill(
            "The model's default version (what a request without a version gets) becomes the "
            "highest version below the current default that the repository holds, or --to "
            "VERSION. A version that is not loaded is loaded and warmed up first (its version "
            "policy widened for it); then it is published at once and the version it replaces "
            "is drained (its requests finish) and unloaded, so no request fails. The model "
            "stays pinned to that version, and polling leaves it alone, until 'inferd model "
            "unpin' or an explicit load of the model. Needs a server in --model-control-mode "
            "poll or explicit.",
            width=88,
        ),
        epilog="examples:\n  inferd model rollback simple -u localhost:8000\n"
        "  inferd model rollback simple -u localhost:8000 --to 1 --admin-token-file token.txt",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rollback.add_argument(
        "--to",
        type=_version,
        metavar="VERSION",
        help="the version to roll to (default: the highest version below the default one)",
    )
    _common(rollback)
    rollback.set_defaults(func=_run_rollback)
    unpin = model_sub.add_parser(
        "unpin",
        help="lift a rollback's pin: the model's version policy applies again",
        description="Load the model again as its repository (and its last load request) says: "
        "its version policy chooses the versions served and the default one again.",
    )
    _common(unpin)
    unpin.set_defaults(func=_run_unpin)
    status = model_sub.add_parser(
        "status",
        help="the repository index: each version's state, and why (failures, pins)",
        description="Every model version the server knows with its state and reason: a failed "
        "load's message, 'unloaded', or the pin a rollback set.",
    )
    _common(status, model_optional=True)
    status.set_defaults(func=_run_status)


def _version(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a version number (1 or more)")
    return int(text)


def _common(p: argparse.ArgumentParser, *, model_optional: bool = False) -> None:
    if model_optional:
        p.add_argument("model", nargs="?", metavar="MODEL", help="only this model's versions")
    else:
        p.add_argument("model", metavar="MODEL", help="the model's name")
    p.add_argument(
        "-u",
        "--url",
        default="localhost:8000",
        metavar="URL",
        help="the server's HTTP address: HOST:PORT, or https://HOST:PORT for TLS "
        "(default: localhost:8000)",
    )
    p.add_argument(
        "--admin-token-file",
        type=Path,
        metavar="FILE",
        help="the server's admin token (the file's content), sent as 'Authorization: Bearer "
        "<token>'; the INFERD_ADMIN_TOKEN environment variable does the same",
    )
    add_connection_arguments(p, sent_with="call", grpc=False)


def _client(args: argparse.Namespace) -> AdminClient:
    """The server's admin client; -H Authorization with an admin token is refused."""
    from inferd.client.admin import AdminClient

    connection = connection_from_args(args, "http", args.url)
    token = read_admin_token(args.admin_token_file, os.environ)
    return AdminClient.from_url(
        args.url, headers=connection.headers, admin_token=token, tls=connection.https
    )


def _fail(command: str, exc: InferdError) -> int:
    """One line on stderr; exit status 2 for a bad command line, 1 for a refusal or failure."""
    print(f"inferd model {command}: error: {exc}", file=sys.stderr)
    return 2 if type(exc) is InvalidArgumentError else 1


def _run_rollback(args: argparse.Namespace) -> int:
    try:
        answer = _client(args).rollback(args.model, args.to)
    except InferdError as exc:
        return _fail("rollback", exc)
    print(
        f"model '{args.model}': version {answer.get('version')} is the default version now, "
        f"pinned (rolled back from version {answer.get('rolled_back_from')}); "
        f"'inferd model unpin {args.model}' lifts the pin"
    )
    return 0


def _run_unpin(args: argparse.Namespace) -> int:
    try:
        _client(args).unpin(args.model)
    except InferdError as exc:
        return _fail("unpin", exc)
    print(f"model '{args.model}': unpinned; its version policy applies again")
    return 0


def _run_status(args: argparse.Namespace) -> int:
    try:
        rows = _client(args).index()
    except InferdError as exc:
        return _fail("status", exc)
    if args.model is not None:
        rows = [row for row in rows if row.get("name") == args.model]
        if not rows:
            return _fail("status", NotFoundError(f"the server knows no model '{args.model}'"))
    table = [("MODEL", "VERSION", "STATE", "REASON")] + [
        (r.get("name", ""), r.get("version", "-"), r.get("state", "-"), r.get("reason", ""))
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    for row in table:
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        print("  ".join([*cells, row[3]]).rstrip())
    return 0
