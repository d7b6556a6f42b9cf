"""A runtime never imports another runtime, and the shared backend modules import none: what
two runtimes both need lives one level down, in ``inferd.backends``. The runtimes are the
registry's built-in backends, so a new one is covered as soon as it is registered."""

from __future__ import annotations

import ast
from pathlib import Path

import inferd.backends
from inferd.backends.registry import _BUILTINS

BACKENDS = Path(inferd.backends.__file__).parent
RUNTIMES = {target.split(":")[0].split(".")[2] for _, target, _, _ in _BUILTINS}


def _runtime_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["inferd", "backends"] and len(parts) > 2 and parts[2] in RUNTIMES:
        return parts[2]
    return None


def _imported(path: Path) -> list[tuple[int, str]]:
    """Every ``inferd`` module the file imports (in functions too), relative ones resolved."""
    parts = ["inferd", "backends", *path.relative_to(BACKENDS).with_suffix("").parts]
    package = parts[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name.startswith("inferd.")]


def _crossings() -> list[str]:
    problems = []
    for path in sorted(BACKENDS.rglob("*.py")):
        module = ".".join(["inferd", "backends", *path.relative_to(BACKENDS).parts])
        here = _runtime_of(module.removesuffix(".py"))
        for line, target in _imported(path):
            there = _runtime_of(target)
            if there is not None and there != here:
                who = f"runtime {here}" if here else "a shared module"
                problems.append(f"{path.relative_to(BACKENDS)}:{line}: {who} imports {target}")
    return problems


def test_the_runtimes_are_the_registered_backends() -> None:
    assert {"onnxruntime", "openvino", "python", "sklearn", "torch", "trees"} <= RUNTIMES


def test_no_runtime_imports_another_runtime() -> None:
    assert _crossings() == []
