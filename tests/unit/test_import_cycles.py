"""``src/inferd`` has no import cycles.

The graph is built from the source with :mod:`ast`: an edge for every ``inferd`` module a module
imports, at module level or inside a function (a function-level import still ties the two modules
together; moving an import into a function is not how a cycle is broken here). Imports under
``if TYPE_CHECKING:`` are left out: they never run, and naming a type of a module that uses you
is how an annotation refers back without a runtime dependency. ``from pkg import name`` counts as
an import of ``pkg.name`` when that is a module, else of ``pkg``; importing a submodule also
imports its packages' ``__init__`` modules, but the graph follows only the written imports (a
package ``__init__`` that re-exports its own submodules is not a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import inferd

SRC = Path(inferd.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under an ``if TYPE_CHECKING:`` block."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                hidden |= {id(n) for n in ast.walk(statement)}
    return hidden


def _resolve(module: str) -> str | None:
    """The nearest module of ``src/inferd`` that ``module`` names."""
    while module and module not in MODULES:
        module = module.rpartition(".")[0]
    return module or None


def imports_of(module: str) -> set[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hidden = _type_checking_only(tree)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str | None] = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            found |= {_resolve(a.name) for a in node.names if a.name.startswith("inferd.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            if name != "inferd" and not name.startswith("inferd."):
                continue
            for alias in node.names:
                sub = f"{name}.{alias.name}"
                found.add(sub if sub in MODULES else _resolve(name))
    found.discard(None)
    found.discard(module)
    return {m for m in found if m is not None}


def graph() -> dict[str, set[str]]:
    return {module: imports_of(module) for module in MODULES}


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return components


def test_src_has_no_import_cycles() -> None:
    assert find_cycles(graph()) == []


def test_the_check_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(edges) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_function_level_imports_count_and_type_checking_ones_do_not() -> None:
    edges = graph()
    worker = "inferd.backends.python.worker.worker"
    # worker.py imports decoupled.py inside a function; decoupled.py names the Worker type only
    assert "inferd.backends.python.worker.decoupled" in edges[worker]
    assert worker not in edges["inferd.backends.python.worker.decoupled"]
    # ``from package import module`` is an edge to the module
    assert "inferd.backends.python.worker.triton_python_backend_utils" in edges[worker]
