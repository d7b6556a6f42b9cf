"""The public API is what README.md and docs/ show users; it changes only on purpose.

Each documented module's ``__all__`` is pinned here as an explicit set: adding, removing or
renaming a public name means editing this file too. Every import written in the docs must work,
and every ``inferd.x.y`` the docs name must resolve.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "examples" / "README.md", *(ROOT / "docs").glob("*.md")])

PUBLIC: dict[str, set[str]] = {
    "inferd": {"__version__"},
    "inferd.errors": {
        "AccessDeniedError",
        "AlreadyExistsError",
        "CandidateSkipped",
        "ConfigError",
        "DeadlineExceededError",
        "ErrorCode",
        "HpackError",
        "InferdError",
        "InternalError",
        "InvalidArgumentError",
        "InvalidInputError",
        "LoadFailedError",
        "ModelLoadError",
        "NotFoundError",
        "OverloadedError",
        "PerfAccessError",
        "PerfRequestError",
        "PerfRunError",
        "PermissionDeniedError",
        "RepositoryCallError",
        "RequestCancelledError",
        "ServerPermissionDeniedError",
        "ServerStartError",
        "ServerUnauthenticatedError",
        "ServerUnreachableError",
        "UnauthenticatedError",
        "UnavailableError",
        "UnsupportedError",
    },
    "inferd.client": {
        "AdminClient",
        "Endpoint",
        "GrpcTlsSettings",
        "Headers",
        "HttpsSettings",
        "access_message",
        "format_host",
        "is_https",
        "parse_headers",
        "split_url",
    },
    "inferd.server.embedded": {"InferenceServer"},
    "inferd.examples.tabular_models": {"build_fraud_xgboost", "build_wine_pipeline", "fraud_split"},
    "inferd.testing": {"FakeClock", "FakeInstance", "ServerProcess", "running_server"},
    "inferd.core.inference": {
        "InferRequest",
        "InferResponse",
        "OutputBuffer",
        "ParamValue",
        "RequestedOutput",
    },
    "inferd.core.model_spec": {
        "DynamicBatchingSpec",
        "EnsembleStepSpec",
        "InstanceGroupSpec",
        "ModelSpec",
        "OptimizationSpec",
        "QueuePolicySpec",
        "TensorSpec",
        "WarmupInputSpec",
        "WarmupSpec",
    },
    "inferd.backends.base": {
        "Backend",
        "ExecutionTimes",
        "LoadContext",
        "LoadedModel",
        "ModelInstance",
        "Outputs",
        "Result",
        "ThreadCalls",
        "TimedInstance",
    },
    "inferd.integrations.ray_serve": {"InferdReplica", "inferd_deployment"},
    "inferd.testing.conformance": {
        "CHECKS",
        "ConformanceCase",
        "ConformanceError",
        "LoadedCase",
        "conformance_tests",
        "load_case",
        "run_all",
        "run_check",
    },
}

# `from inferd.a.b import x, y` (also inside parentheses) and `import inferd.a.b`
FROM_IMPORT = re.compile(
    r"^\s*from\s+(inferd(?:\.\w+)*)\s+import\s+(?:\(([^)]*)\)|([^\n#]+))", re.M
)
PLAIN_IMPORT = re.compile(r"^\s*import\s+(inferd(?:\.\w+)*)", re.M)
DOTTED = re.compile(r"\binferd(?:\.[A-Za-z_]\w*)+")


def documented_imports() -> dict[str, set[str]]:
    """Module -> names the docs' code imports from it (an empty set for a plain import)."""
    found: dict[str, set[str]] = {}
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for module, wrapped, names in FROM_IMPORT.findall(text):
            listed = (wrapped or names).replace("\n", ",").split(",")
            found.setdefault(module, set()).update(n.split()[0] for n in listed if n.strip())
        for module in PLAIN_IMPORT.findall(text):
            found.setdefault(module, set())
    return found


def resolve(dotted: str) -> object:
    """Import the longest module prefix of ``dotted`` and look the rest up as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            target = getattr(target, attr)
        return target
    raise ModuleNotFoundError(dotted)


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_all_is_pinned(name: str) -> None:
    exported = _module(name).__all__
    assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
    assert set(exported) == PUBLIC[name]


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_exported_name_exists(name: str) -> None:
    module = _module(name)
    missing = [attr for attr in module.__all__ if not hasattr(module, attr)]
    assert not missing, f"{name}.__all__ names what the module lacks: {missing}"


def test_the_docs_import_only_pinned_modules_and_names() -> None:
    imports = documented_imports()
    assert "inferd.server.embedded" in imports  # the scan itself works
    for module, names in imports.items():
        assert module in PUBLIC, f"the docs import from {module}: pin its __all__ here"
        assert names <= PUBLIC[module], f"the docs import {names - PUBLIC[module]} from {module}"


@pytest.mark.parametrize(
    "dotted",
    sorted({m for doc in DOCS for m in DOTTED.findall(doc.read_text(encoding="utf-8"))}),
)
def test_every_name_the_docs_mention_resolves(dotted: str) -> None:
    resolve(dotted)


def test_documented_batching_helpers_exist() -> None:
    # docs/backends.md sends plugin authors to these to stack requests along the batch dimension
    batching = _module("inferd.backends.batching")
    for name in ("can_concatenate", "concatenate_inputs", "split_outputs"):
        assert callable(getattr(batching, name, None)), name
