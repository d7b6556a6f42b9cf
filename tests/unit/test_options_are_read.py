"""Every option a user can set is read by the code it configures, never accepted and ignored."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from pathlib import Path

import inferd
from inferd.cli.main import build_parser
from inferd.server.config import ServerConfig

SRC = Path(inferd.__file__).parent


def _attributes_read(path: Path, *, skip_functions: frozenset[str] = frozenset()) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef) and func.name in skip_functions:
            skipped.update(id(n) for n in ast.walk(func))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Load)
        and id(node) not in skipped
    }


def test_every_server_config_field_is_read() -> None:
    """A field only validated (``__post_init__``) or only filled in by the CLI does nothing."""
    read: set[str] = set()
    for path in SRC.rglob("*.py"):
        if path.parent == SRC / "cli" and path.name.startswith("serve"):
            continue  # builds the config from the flags
        skip = frozenset({"__post_init__"}) if path == SRC / "server" / "config.py" else frozenset()
        read |= _attributes_read(path, skip_functions=skip)
    unread = [f.name for f in dataclasses.fields(ServerConfig) if f.name not in read]
    assert unread == []


def _serve_parser() -> argparse.ArgumentParser:
    root = build_parser()
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["serve"]
    raise AssertionError("no serve sub-command")


def _getattr_patterns(path: Path) -> list[re.Pattern[str]]:
    """``getattr(args, f"{proto}_use_ssl")`` read several flags: each as a pattern."""
    patterns = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.JoinedStr)
        ):
            parts = [
                re.escape(v.value) if isinstance(v, ast.Constant) else r"\w+"
                for v in node.args[1].values
            ]
            patterns.append(re.compile("".join(parts)))
    return patterns


def test_every_serve_flag_is_read() -> None:
    # serve.py and the modules that declare groups of its flags (cli/serve_*.py)
    paths = [SRC / "cli" / "serve.py", *sorted((SRC / "cli").glob("serve_*.py"))]
    read = set().union(*(_attributes_read(path) for path in paths))
    patterns = [p for path in paths for p in _getattr_patterns(path)]
    dests = [
        a.dest
        for a in _serve_parser()._actions
        if not isinstance(a, argparse._HelpAction) and a.dest != argparse.SUPPRESS
    ]
    assert dests
    unread = [d for d in dests if d not in read and not any(p.fullmatch(d) for p in patterns)]
    assert unread == []
