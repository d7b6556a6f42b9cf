"""Every import in ``src/inferd`` follows the layers of docs/architecture.md.

Imports point down only::

    cli → integrations → server → frontends, metrics, monitoring, rollout → engine → repository
        → scheduling → backends → codecs → core → errors

``tools`` sit beside the engine and use it, ``client`` (which talks to a running server), the
codecs, core and errors; ``testing`` and
``examples`` may use anything (and only the CLI uses ``examples``). Siblings (``frontends``
and ``metrics``) do not import each other.
Inside ``backends``, a runtime imports only the shared backend modules, never another runtime,
and the shared modules import no runtime. Imports inside functions count as much as the ones at
the top of a module.
The Python backend runs in two processes, one package each: ``backends/python/server`` never
imports ``backends/python/worker`` and the worker never imports the server; what both use
(``protocol``, ``shm``, ``lifetime``, the public ``api``) sits in ``backends/python`` itself and
imports neither, but for two public names kept where users find them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import inferd
from inferd.backends.registry import _BUILTINS

SRC = Path(inferd.__file__).parent

RANK = {
    "errors": 0,
    "core": 1,
    "codecs": 2,
    "backends": 3,
    "scheduling": 4,
    "repository": 5,
    "engine": 6,
    "frontends": 7,
    "metrics": 7,
    "tools": 7,
    "client": 7,
    "monitoring": 7,
    "rollout": 7,
    "server": 8,
    "integrations": 9,
    "cli": 10,
}
ANYTHING = {"testing", "examples"}
CLIENT_MAY_USE = {"codecs", "core", "errors"}
TOOLS_MAY_USE = {"client", "engine", "codecs", "core", "errors"}
# the registry's built-in runtimes: a new one is covered as soon as it is registered
RUNTIMES = {target.split(":")[0].split(".")[2] for _, target, _, _ in _BUILTINS}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every inferd module imported, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("inferd")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module == "inferd":  # from inferd import x: x may be a package
                found += [(node.lineno, f"inferd.{a.name}") for a in node.names]
            elif module.startswith("inferd."):
                found.append((node.lineno, module))
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _runtime(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "backends" and parts[2] in RUNTIMES:
        return parts[2]
    return None


def _violation(source: str, target: str) -> str | None:
    src_layer, dst_layer = _layer(source), _layer(target)
    if dst_layer == "__version__" or src_layer in ANYTHING or not src_layer:
        return None
    if dst_layer in ANYTHING:
        # `inferd repo build-examples` is the one product use of the example builders
        if (src_layer, dst_layer) == ("cli", "examples"):
            return None
        return "imports a test or example helper"
    if src_layer == dst_layer:
        if src_layer != "backends":
            return None
        src_rt, dst_rt = _runtime(source), _runtime(target)
        if dst_rt is not None and src_rt != dst_rt:
            return f"runtime {dst_rt} imported by " + (
                f"runtime {src_rt}" if src_rt else "a shared backend module"
            )
        return None
    if src_layer == "client":  # knows nothing of the server's internals, nor of the tools
        return None if dst_layer in CLIENT_MAY_USE else "the client uses codecs, core, errors"
    if src_layer == "tools":
        return (
            None
            if dst_layer in TOOLS_MAY_USE
            else "tools use the client, engine, codecs, core, errors"
        )
    if src_layer in RANK and dst_layer in RANK and RANK[dst_layer] < RANK[src_layer]:
        return None
    return f"{src_layer} may not import {dst_layer}"


PYTHON = "inferd.backends.python"
#: The package's ``PythonBackend`` (loaded on first use: the registry's entry point) and the old
#: path of ``triton_python_backend_utils`` (an alias of the worker's module).
PYTHON_REEXPORTS = {PYTHON, f"{PYTHON}.triton_python_backend_utils"}


def _python_side(module: str) -> str | None:
    if module != PYTHON and not module.startswith(f"{PYTHON}."):
        return None
    side = module.split(".")[3] if module.count(".") >= 3 else ""
    return side if side in ("server", "worker") else "shared"


def _python_violation(source: str, target: str) -> str | None:
    src, dst = _python_side(source), _python_side(target)
    if src is None or dst in (None, "shared", src):
        return None
    if src == "shared" and source in PYTHON_REEXPORTS:
        return None
    return f"the Python backend's {src} side imports its {dst} side"


def test_the_python_backend_sides_do_not_import_each_other() -> None:
    problems = []
    for path in sorted((SRC / "backends" / "python").rglob("*.py")):
        source = _module_name(path)
        for line, target in _imports(path):
            why = _python_violation(source, target)
            if why is not None:
                problems.append(f"{path.relative_to(SRC)}:{line} imports {target}: {why}")
    assert problems == []
    assert {_python_side(_module_name(p)) for p in (SRC / "backends" / "python").rglob("*.py")} == {
        "server",
        "worker",
        "shared",
    }


def test_a_python_worker_process_loads_no_server_module() -> None:
    """What the worker and the zygote import, run in a fresh interpreter, as they are started."""
    code = (
        "import sys, inferd.backends.python.worker.worker, inferd.backends.python.worker.zygote\n"
        "import inferd.backends.python.worker.decoupled\n"
        "print(sorted(m for m in sys.modules if m.startswith('inferd.backends.python.server')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_python_side_rule_catches_crossings() -> None:
    server, worker = f"{PYTHON}.server.instance", f"{PYTHON}.worker.worker"
    assert _python_violation(server, worker) is not None
    assert _python_violation(worker, f"{PYTHON}.server") is not None
    assert _python_violation(f"{PYTHON}.shm", worker) is not None
    assert _python_violation(f"{PYTHON}.protocol", f"{PYTHON}.server.transfer") is not None
    assert _python_violation(server, f"{PYTHON}.shm") is None
    assert _python_violation(worker, f"{PYTHON}.protocol") is None
    assert _python_violation(worker, f"{PYTHON}.worker.streaming") is None
    assert _python_violation(PYTHON, f"{PYTHON}.server.backend") is None
    assert _python_violation("inferd.server.server", f"{PYTHON}.shm") is None


def test_every_import_follows_the_layers() -> None:
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        source = _module_name(path)
        for line, target in _imports(path):
            why = _violation(source, target)
            if why is not None:
                problems.append(f"{path.relative_to(SRC)}:{line} imports {target}: {why}")
    assert problems == []


def test_the_runtimes_are_known() -> None:
    assert {"onnxruntime", "openvino", "python", "torch", "trees", "sklearn"} <= RUNTIMES


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    assert (packages | modules) - set(RANK) - ANYTHING == set()


def test_the_rule_catches_upward_and_sideways_imports() -> None:
    assert _violation("inferd.core.names", "inferd.codecs.limits") is not None
    assert _violation("inferd.codecs.statistics", "inferd.scheduling.stats") is not None
    assert _violation("inferd.metrics.endpoint", "inferd.frontends.http.server") is not None
    assert _violation("inferd.backends.sklearn", "inferd.backends.trees.tabular") is not None
    assert _violation("inferd.backends.batching", "inferd.repository.loader") is not None
    assert _violation("inferd.testing.conformance", "inferd.repository.loader") is None
    assert _violation("inferd.backends.torch.backend", "inferd.backends.base") is None
    assert _violation("inferd.server.server", "inferd.frontends.http.app") is None
    assert _violation("inferd.tools.analyze.control", "inferd.client.admin") is None
    assert _violation("inferd.cli.rollout", "inferd.client.admin") is None
    assert _violation("inferd.client.admin", "inferd.tools.perf.metadata") is not None
    assert _violation("inferd.client.admin", "inferd.engine") is not None
