"""Every state change of a model version goes through the lifecycle table."""

from __future__ import annotations

import ast
import logging
import re
import threading
from pathlib import Path

import pytest

import inferd.repository.manager as manager_module
from inferd.core.lifecycle import ModelState
from inferd.errors import InternalError
from inferd.repository.manager import ControlMode, ModelRecord
from tests.helpers.models import write_add_sub
from tests.integration.test_repository_manager import make, request

_MOVE = re.compile(r"model '(\w+)' version (\d+): (\w+) -> (\w+)")


def _moves(caplog: pytest.LogCaptureFixture, model: str) -> list[tuple[str, str]]:
    found = [_MOVE.search(r.getMessage()) for r in caplog.records]
    return [(m[3], m[4]) for m in found if m is not None and m[1] == model]


async def test_load_reload_unload_and_close_follow_the_table(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="inferd.repository")
    write_add_sub(tmp_path, "simple")
    manager, engine = make([tmp_path], ControlMode.EXPLICIT)
    await manager.startup(["simple"])
    try:
        await engine.load_model("simple")  # a reload: version 1 stays READY throughout
        await engine.infer(request())
        await engine.unload_model("simple")
        await engine.load_model("simple")
    finally:
        await manager.close()
    assert _moves(caplog, "simple") == [
        ("UNKNOWN", "LOADING"),
        ("LOADING", "READY"),
        ("READY", "UNLOADING"),
        ("UNLOADING", "UNAVAILABLE"),
        ("UNAVAILABLE", "LOADING"),
        ("LOADING", "READY"),
        # close() unloads through UNLOADING as an unload does
        ("READY", "UNLOADING"),
        ("UNLOADING", "UNAVAILABLE"),
    ]


async def test_a_failed_load_moves_loading_to_unavailable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="inferd.repository")
    broken = write_add_sub(tmp_path, "broken")
    (broken / "1" / "model.onnx").write_bytes(b"not onnx")
    manager, engine = make([tmp_path], ControlMode.EXPLICIT)
    await manager.startup()
    try:
        for _ in range(2):
            with pytest.raises(Exception, match="failed to load 'broken'"):
                await engine.load_model("broken")
    finally:
        await manager.close()
    assert _moves(caplog, "broken") == [
        ("UNKNOWN", "LOADING"),
        ("LOADING", "UNAVAILABLE"),
        ("UNAVAILABLE", "LOADING"),
        ("LOADING", "UNAVAILABLE"),
    ]


def test_an_illegal_transition_is_refused() -> None:
    record = ModelRecord("m")
    record.move(1, ModelState.LOADING)
    record.move(1, ModelState.READY)
    with pytest.raises(InternalError, match="READY -> LOADING"):
        record.move(1, ModelState.LOADING)
    with pytest.raises(InternalError, match="READY -> UNAVAILABLE"):
        record.move(1, ModelState.UNAVAILABLE, "skipped UNLOADING")
    assert record.status[1].state is ModelState.READY


def test_no_code_writes_a_state_except_the_one_function() -> None:
    """States are read anywhere but written only by ``ModelRecord.move`` (and the model-level
    entry dropped by ``forget_model_level``)."""
    tree = ast.parse(Path(manager_module.__file__).read_text(encoding="utf-8"))
    allowed = {"move", "forget_model_level"}
    offenders: list[str] = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) or func.name in allowed:
            continue
        for node in ast.walk(func):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                mutators = {"pop", "clear", "update", "setdefault", "popitem"}
                if (
                    isinstance(owner, ast.Attribute)
                    and owner.attr == "status"
                    and node.func.attr in mutators
                ):
                    offenders.append(f"{func.name}: status.{node.func.attr}()")
            for target in targets:
                inner = target.value if isinstance(target, ast.Subscript) else target
                if isinstance(inner, ast.Attribute) and inner.attr == "status":
                    offenders.append(f"{func.name}: line {node.lineno}")
    assert offenders == []


async def test_repository_scans_run_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_add_sub(tmp_path, "simple")
    loop_thread = threading.current_thread()
    scanned_on: list[threading.Thread] = []
    real = manager_module.find_models

    def spy(roots: list[Path]) -> dict[str, list[Path]]:
        scanned_on.append(threading.current_thread())
        return real(roots)

    monkeypatch.setattr(manager_module, "find_models", spy)
    manager, engine = make([tmp_path], ControlMode.EXPLICIT)
    await manager.startup(["simple"])
    try:
        await engine.load_model("simple")
        await engine.unload_model("simple")
        await engine.unload_model("other")  # Triton's meaning: unknown model, no-op
        before = len(scanned_on)
        assert [e.name for e in await engine.repository_index()] == ["simple"]
        assert len(scanned_on) == before + 1
    finally:
        await manager.close()
    assert len(scanned_on) >= 3
    assert loop_thread not in scanned_on


async def test_unload_dependents_is_honoured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="inferd.repository")
    write_add_sub(tmp_path, "simple")
    manager, engine = make([tmp_path], ControlMode.EXPLICIT)
    await manager.startup(["simple"])
    try:
        await engine.unload_model("simple", unload_dependents=True)
        assert (await engine.repository_index(ready_only=True)) == []
        assert "it is composed of no other model" in caplog.text
    finally:
        await manager.close()
