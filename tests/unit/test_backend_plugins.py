"""Third-party backends through the ``inferd.backends`` entry point group, and missing runtimes.

A plugin distribution is made in a temporary directory (a module plus a ``.dist-info`` with
``entry_points.txt``) and put on ``sys.path``: exactly what ``pip install`` leaves behind, with
no network. The plugin module is the example printed in docs/backends.md, so the docs run.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.backends.base import LoadContext, Result
from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.engine import Engine
from inferd.errors import InternalError, InvalidInputError, ModelLoadError, UnavailableError
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import RepositoryManager
from inferd.testing.conformance import CHECKS, ConformanceCase, ConformanceError, run_all, run_check

DOCS = Path(__file__).resolve().parents[2] / "docs" / "backends.md"
MODULE = "inferd_scale_backend"
DIST = "inferd_scale_backend-1.0"


def _docs_example() -> str:
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(rf"<!-- example: {MODULE}\.py -->\n```python\n(.*?)```", text, re.S)
    assert found, f"docs/backends.md lost the {MODULE}.py example"
    return found.group(1)


def _install(site: Path, module_source: str, entry_point: str) -> None:
    """Lay out a distribution as pip would: the module and its ``.dist-info``."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{MODULE}.py").write_text(module_source, encoding="utf-8")
    info = site / f"{DIST}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: inferd-scale-backend\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(f"[inferd.backends]\n{entry_point}\n", encoding="utf-8")


@pytest.fixture
def plugin(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path_factory.mktemp("site")
    _install(site, _docs_example(), f"scale = {MODULE}:ScaleBackend")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    return site


CONFIG = """
backend: "scale"
max_batch_size: 8
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] } ]
"""


def _write_scale(version_dir: Path) -> str:
    (version_dir / "model.json").write_text(json.dumps({"scale": 2.0}), encoding="utf-8")
    return CONFIG


def _inputs(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray[Any, Any]]:
    return {"X": rng.standard_normal((rows, 4)).astype(np.float32)}


def _check(inputs: dict[str, np.ndarray[Any, Any]], outputs: Any) -> None:
    np.testing.assert_allclose(outputs["Y"], inputs["X"] * 2)


SCALE = ConformanceCase("scale_plugin", _write_scale, _inputs, _check)


@pytest.mark.usefixtures("plugin")
@pytest.mark.parametrize("check", CHECKS)
def test_conformance_over_the_plugin(check: str, tmp_path: Path) -> None:
    run_check(SCALE, check, tmp_path)  # the backend comes from the entry point


def test_entry_point_is_found_and_imported_lazily(plugin: Path) -> None:
    registry = default_registry()
    assert "scale" in registry.names()
    assert MODULE not in sys.modules  # listed, not imported
    backend = registry.get("scale")
    assert backend.name == "scale"
    assert MODULE in sys.modules


async def test_plugin_model_serves_through_the_engine(plugin: Path, tmp_path: Path) -> None:
    repo = tmp_path / "models"
    version_dir = repo / "doubler" / "1"
    version_dir.mkdir(parents=True)
    (repo / "doubler" / "config.pbtxt").write_text(_write_scale(version_dir), encoding="utf-8")
    manager = RepositoryManager([repo], default_registry(), options=LoadOptions())
    try:
        failures = await manager.startup()
        assert failures == {}
        engine = Engine(manager, server_version="test")
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        response = await engine.infer(InferRequest(model_name="doubler", inputs={"X": x}))
        np.testing.assert_array_equal(response.outputs["Y"], x * 2)
    finally:
        await manager.close()


def test_plugin_with_missing_dependency_names_its_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    _install(site, "import inferd_no_such_runtime  # noqa\n", f"scale = {MODULE}:ScaleBackend")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    with pytest.raises(UnavailableError, match=r"pip install 'inferd-scale-backend'"):
        default_registry().get("scale")


def test_builtin_with_missing_runtime_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in [m for m in sys.modules if m.startswith("inferd.backends.openvino")]:
        monkeypatch.delitem(sys.modules, module)  # forget the backend package and its parts
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino -> ImportError
    with pytest.raises(UnavailableError) as info:
        default_registry(load_entry_points=False).get("openvino")
    assert "pip install 'inferd[openvino]'" in str(info.value)


# -- the kit finds broken backends ---------------------------------------------------------------


class _Broken:
    """The scale backend with one deliberate contract violation, chosen by ``flaw``."""

    name = "scale"
    platforms: tuple[str, ...] = ()
    default_model_filename = "model.json"

    def __init__(self, flaw: str) -> None:
        self.flaw = flaw

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        pass

    def load(self, ctx: LoadContext) -> _Broken:
        try:
            json.loads(ctx.model_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            if self.flaw == "raw_load_error":
                raise
            raise ModelLoadError(f"failed to load '{ctx.spec.name}': {exc}") from exc
        self.spec: ModelSpec = ctx.spec
        return self

    def create_instance(self, group: InstanceGroupSpec, index: int) -> _Broken:
        self.closed = False
        return self

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        if self.closed and self.flaw != "usable_after_close":
            return [InternalError("closed") for _ in requests]
        results: list[Result] = []
        for i, request in enumerate(requests):
            x = request.inputs["X"]
            if x.shape[1:] != (4,):
                if self.flaw == "bad_fails_batch":
                    return [InvalidInputError("bad batch") for _ in requests]
                results.append(InvalidInputError("bad shape"))
                continue
            y = x * 2
            if self.flaw == "float64_output":
                y = y.astype(np.float64)
            if self.flaw == "reordered" and len(requests) > 1:
                y = requests[(i + 1) % len(requests)].inputs["X"] * 2
            results.append({"Y": y})
        return results

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    ("flaw", "check", "message"),
    [
        ("bad_fails_batch", "bad_request_alone", "good request 0 next to a bad one failed"),
        ("float64_output", "single", "has dtype float64, the config says TYPE_FP32"),
        ("reordered", "batch", "request 0 of the batch: output 'Y' has shape [3, 4]"),
        ("usable_after_close", "close", "execute after close answered"),
        ("raw_load_error", "corrupt_file", "raised UnicodeDecodeError, not ModelLoadError"),
    ],
)
def test_kit_catches_contract_violations(
    flaw: str, check: str, message: str, tmp_path: Path
) -> None:
    case = ConformanceCase("broken", _write_scale, _inputs, backend=lambda: _Broken(flaw))
    with pytest.raises(ConformanceError, match=re.escape(message)):
        run_check(case, check, tmp_path)


def test_kit_passes_the_honest_twin(tmp_path: Path) -> None:
    run_all(
        ConformanceCase("honest", _write_scale, _inputs, _check, backend=lambda: _Broken("")),
        tmp_path,
    )
