"""Failed model loads are counted per model (``Engine.load_failures``) and exported as
``inferd_model_load_failures_total``, including the failures an operator would otherwise not
see: a reload or a new version that fails while the old version keeps serving, and a broken
model that every poll finds again (counted once)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest
from inferd.engine import Engine
from inferd.errors import InvalidArgumentError
from inferd.metrics.endpoint import build_registry, render
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import ControlMode, RepositoryManager
from tests.helpers.models import write_add_sub


def _make(roots: list[Path], mode: ControlMode) -> tuple[RepositoryManager, Engine]:
    manager = RepositoryManager(roots, default_registry(), mode=mode, options=LoadOptions())
    return manager, Engine(manager, server_version="test")


async def _serves(engine: Engine, model: str) -> str:
    a = np.zeros((1, 16), dtype=np.int32)
    response = await engine.infer(InferRequest(model, {"INPUT0": a, "INPUT1": a}))
    return response.model_version


def _exported(engine: Engine) -> dict[str, float]:
    text = render(build_registry(engine)).decode()
    found = re.findall(r'^inferd_model_load_failures_total\{model="(\w+)"\} (\S+)$', text, re.M)
    return {model: float(value) for model, value in found}


async def test_failed_reloads_and_versions_are_counted_while_the_old_version_serves(
    tmp_path: Path,
) -> None:
    model_dir = write_add_sub(tmp_path, "m")
    write_add_sub(tmp_path, "fine")
    manager, engine = _make([tmp_path], ControlMode.EXPLICIT)
    await manager.startup(["m", "fine"])
    try:
        assert engine.load_failures() == {}
        assert _exported(engine) == {}
        # a configuration that does not parse: the reload fails, version 1 keeps serving
        with pytest.raises(InvalidArgumentError, match="failed to load 'm'"):
            await engine.load_model("m", config_json="{not json")
        assert await _serves(engine, "m") == "1"
        assert engine.load_failures() == {"m": 1}
        # a new version whose file is broken: it fails, version 1 keeps serving
        (model_dir / "2").mkdir()
        (model_dir / "2" / "model.onnx").write_bytes(b"not an onnx model")
        with pytest.raises(InvalidArgumentError, match="failed to load 'm'"):
            await engine.load_model("m")
        assert await _serves(engine, "m") == "1"
        assert engine.load_failures() == {"m": 2}
        assert _exported(engine) == {"m": 2.0}
        assert engine.is_ready()  # readiness alone would not show any of this
    finally:
        await manager.close()


async def test_a_broken_model_found_by_every_poll_counts_once(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_add_sub(a, "dup")
    write_add_sub(b, "dup")
    write_add_sub(a, "fine")
    manager, engine = _make([a, b], ControlMode.POLL)
    await manager.startup()
    try:
        await manager.poll_once()
        await manager.poll_once()
        assert engine.load_failures() == {"dup": 1}
        assert _exported(engine) == {"dup": 1.0}
    finally:
        await manager.close()
