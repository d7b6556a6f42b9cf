"""``inferd rollout``: a running server's traffic policies (docs/rollout.md), over its HTTP
admin API.

``show`` reads a model's policy with its live figures; ``set`` replaces it with a YAML (or JSON)
file, checked here first; ``clear`` removes it; ``promote`` and ``rollback`` move a canary;
``feedback`` posts a reward for an answered request. The admin token (``--admin-token-file`` or
``INFERD_ADMIN_TOKEN``, as for ``inferd serve``) is sent as ``Authorization: Bearer <token>``;
``feedback`` sends the feedback token (``--feedback-token-file`` or ``INFERD_FEEDBACK_TOKEN``)
instead when one is given.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from inferd.cli.admin_token import (
    ENV_VAR,
    FEEDBACK_ENV_VAR,
    read_admin_token,
    read_feedback_token,
)
from inferd.cli.perf_connection import add_connection_arguments, connection_from_args
from inferd.client.admin import AdminClient
from inferd.client.endpoint import Endpoint
from inferd.errors import InferdError, InvalidArgumentError
from inferd.rollout.policy import parse_policy_text

__all__ = ["add_rollout_parser", "format_report"]

FEEDBACK_HINT = (
    f"pass the feedback token with --feedback-token-file FILE (or the {FEEDBACK_ENV_VAR} "
    f"environment variable), or the admin token with --admin-token-file FILE (or {ENV_VAR})"
)

EXAMPLE = """\
examples:
  inferd rollout show digits -u localhost:8000
  inferd rollout set digits canary.yaml -u localhost:8000 --admin-token-file token.txt
  inferd rollout promote digits -u localhost:8000
  inferd rollout rollback digits --reason "wrong labels" -u localhost:8000
  inferd rollout feedback digits --id 3f2a... --reward 1 --feedback-token-file fb.txt
  inferd rollout clear digits -u localhost:8000

The server refuses every change, and feedback, without a token (403) unless its operator
opened them with --open-api; give the token as below or in INFERD_ADMIN_TOKEN.
Exit status: 0 done, 2 a bad command line or policy file, 1 the server cannot be reached,
refuses (401, 403) or fails.
"""


def add_rollout_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "rollout",
        help="traffic policies of a running server: show, set, clear, promote, rollback, feedback",
        description=(
            "Read and change a running server's traffic policies (shadow, split, bandit, "
            "canary) through its HTTP admin API. A model's policy comes from the rollout.yaml "
            "beside its config.pbtxt, or from `inferd rollout set` (kept in memory until the "
            "model reloads with a file, or it is cleared). See docs/rollout.md."
        ),
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="rollout_command", metavar="ACTION", required=True)
    parsers = {
        "show": "the model's policy, its variants' figures, the Bayesian comparison and the "
        "canary's stage",
        "set": "replace the model's policy with FILE (YAML or JSON, the rollout.yaml schema)",
        "clear": "remove the model's policy: every request goes to the default version again",
        "promote": "move a canary to its next stage",
        "rollback": "roll a canary back: every request goes to the primary",
        "feedback": "credit a reward to the variant that answered a request",
    }
    for name, text in parsers.items():
        q = actions.add_parser(name, help=text, description=text)
        q.add_argument("model", metavar="MODEL", help="the model's name")
        if name == "set":
            q.add_argument("file", type=Path, metavar="FILE", help="the policy file")
        if name == "rollback":
            q.add_argument("--reason", default="", help="why, kept in the canary's history")
        if name == "feedback":
            q.add_argument("--id", required=True, dest="request_id", help="the response's id")
            q.add_argument(
                "--reward", required=True, type=_finite, help="the reward (binary: 0..1)"
            )
            q.add_argument(
                "--feedback-token-file",
                type=Path,
                metavar="FILE",
                help="the server's feedback token (the file's content), sent instead of the "
                f"admin token; the {FEEDBACK_ENV_VAR} environment variable does the same",
            )
        if name == "show":
            q.add_argument("--json", action="store_true", help="print the server's JSON answer")
        q.add_argument(
            "-u",
            "--url",
            default="localhost:8000",
            metavar="HOST:PORT",
            help="the server's HTTP endpoint; https://HOST:PORT for TLS, checked against the "
            "system's certificate authorities unless the --ssl-https-* flags say otherwise "
            "(default: localhost:8000)",
        )
        q.add_argument(
            "--admin-token-file",
            type=Path,
            metavar="FILE",
            help=f"the server's admin token (the file's content); the {ENV_VAR} environment "
            "variable does the same",
        )
        add_connection_arguments(q, sent_with="call", grpc=False)
        q.set_defaults(func=run_rollout)


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    return value


def run_rollout(args: argparse.Namespace) -> int:
    """One line on stderr on failure; exit status 2 for a bad command line or policy file, 1
    when the server cannot be reached, refuses or fails."""
    command = args.rollout_command
    try:
        answer = _call(args)
    except InferdError as exc:
        print(f"inferd rollout {command}: error: {exc}", file=sys.stderr)
        return 2 if type(exc) is InvalidArgumentError else 1
    if command == "clear":
        print(f"the traffic policy of '{args.model}' is cleared")
    elif command == "feedback":
        assert answer is not None
        print(f"reward {answer['reward']:g} credited to variant '{answer['variant']}'")
    elif command == "show" and args.json:
        print(json.dumps(answer, indent=2))
    else:
        assert answer is not None
        print(format_report(answer))
    return 0


def _policy(args: argparse.Namespace) -> dict[str, Any]:
    try:
        text = args.file.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    try:
        policy = parse_policy_text(text)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{args.file}: {exc}") from None
    return policy.as_dict()


def _client(args: argparse.Namespace) -> AdminClient:
    token = None
    if args.rollout_command == "feedback":
        token = read_feedback_token(args.feedback_token_file, os.environ)
    if token is None:
        token = read_admin_token(args.admin_token_file, os.environ)
    connection = connection_from_args(args, "http", args.url)
    endpoint = Endpoint.from_url(
        args.url, tls=connection.https, headers=connection.headers, token=token
    )
    return AdminClient(endpoint)


def _call(args: argparse.Namespace) -> dict[str, Any] | None:
    command, model = args.rollout_command, args.model
    policy = _policy(args) if command == "set" else None
    client = _client(args)
    if command == "show":
        return client.rollout_get(model)
    if command == "set":
        assert policy is not None
        return client.rollout_set(model, policy)
    if command == "clear":
        client.rollout_clear(model)
        return None
    if command == "promote":
        return client.rollout_promote(model)
    if command == "rollback":
        return client.rollout_rollback(model, args.reason)
    return client.feedback(model, args.request_id, args.reward, token_hint=FEEDBACK_HINT)


def _cell(value: Any, fmt: str = "{:g}") -> str:
    if value is None:
        return "-"
    return fmt.format(value) if isinstance(value, int | float) else str(value)


def format_report(report: dict[str, Any]) -> str:
    """A policy report (``GET /v2/models/{m}/rollout``) as text."""
    lines = [f"model '{report['model']}': {report['kind']} policy"]
    header = ("variant", "target", "share", "requests", "errors", "p99 ms", "rewards", "mean")
    rows = [header]
    for v in report["variants"]:
        target = (v["model"] if v["model"] != report["model"] else "") + (
            f" v{v['version']}" if v["version"] is not None else " latest"
        )
        rows.append(
            (
                v["name"],
                target.strip(),
                _cell(v["share"], "{:.1%}"),
                _cell(v["requests"]),
                _cell(v["errors"]),
                _cell(v["latency_p99_ms"], "{:.2f}"),
                _cell(v["feedback"]),
                _cell(v["reward_mean"], "{:.4f}"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    for v in report["variants"]:
        m = v.get("mirrored")
        if m:
            lines.append(
                f"  mirrored to/for '{v['name']}': {m['requests']} finished, {m['errors']} "
                f"failed, {m['skipped']} skipped; agreement {_cell(m['agreement'], '{:.1%}')}, "
                f"max abs error {_cell(m['max_abs_error'])}, "
                f"mean cosine {_cell(m['mean_cosine'], '{:.4f}')}"
            )
    comparison = report.get("comparison")
    if comparison:
        for name, c in comparison["candidates"].items():
            low, high = c["interval"]
            unit = "{:+.1%}" if c["lift_kind"] == "relative" else "{:+.4g}"
            lines.append(
                f"  '{name}' vs '{comparison['baseline']}': P(better) = {c['p_better']:.3f}, "
                f"lift {unit.format(c['expected_lift'])} "
                f"(95% interval {unit.format(low)} .. {unit.format(high)}; "
                f"{c['n_candidate']} vs {c['n_baseline']} rewards)"
            )
    canary = report.get("canary")
    if canary:
        lines.append(
            f"  canary: stage {canary['stage'] + 1} of {len(canary['stages'])} "
            f"({canary['share']:.1%} to the candidate), {canary['status']}"
            + (f": {canary['reason']}" if canary["reason"] else "")
        )
        for change in canary["history"]:
            lines.append(
                f"    stage {change['stage'] + 1} ({change['share']:.1%}) {change['status']}"
                + (f": {change['reason']}" if change["reason"] else "")
            )
    return "\n".join(lines)
