"""Every state change of a model version goes through the lifecycle table."""

from __future__ import annotations

import ast
import asyncio
import logging
import re
import threading
from pathlib import Path

import pytest

import inferd.repository.lifecycle as lifecycle_module
import inferd.repository.manager as manager_module
from inferd.core.lifecycle import ModelState
from inferd.errors import InternalError, UnavailableError
from inferd.repository.manager import ControlMode, ModelRecord, RepositoryManager
from inferd.scheduling.dynamic import DynamicBatcher
from tests.helpers.models import ADD_SUB_CONFIG, write_add_sub
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


@pytest.mark.parametrize("module", [manager_module, lifecycle_module])
def test_no_code_writes_a_state_except_the_one_function(module: object) -> None:
    """States are read anywhere but written only by ``ModelRecord.move`` (and the model-level
    entry dropped by ``forget_model_level``)."""
    tree = ast.parse(Path(str(getattr(module, "__file__", ""))).read_text(encoding="utf-8"))
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


def _batched(delay_us: int) -> str:
    """The add/sub config with a dynamic batcher that holds a lone request ``delay_us``."""
    return ADD_SUB_CONFIG + (
        f"dynamic_batching {{ preferred_batch_size: [ 8 ] max_queue_delay_microseconds: "
        f"{delay_us} }}"
    )


async def _queued(manager: RepositoryManager, name: str) -> DynamicBatcher:
    """The model's batcher once a request waits in it."""
    batcher = manager.get(name, None).scheduler
    assert isinstance(batcher, DynamicBatcher)
    for _ in range(1000):  # the request reaches the batcher within a few loop turns
        if batcher.in_flight:
            break
        await asyncio.sleep(0)
    assert batcher.in_flight == 1
    return batcher


async def test_close_drains_requests_in_flight_as_an_unload_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A request the batcher still holds when the repository closes gets its answer, not a
    cancellation; the version goes READY -> UNLOADING -> UNAVAILABLE as in an unload."""
    caplog.set_level(logging.DEBUG, logger="inferd.repository")
    write_add_sub(tmp_path, "held", config=_batched(200_000))
    manager, engine = make([tmp_path], ControlMode.EXPLICIT)
    assert await manager.startup(["held"]) == {}
    pending = asyncio.create_task(engine.infer(request("held")))
    try:
        await _queued(manager, "held")
    finally:
        await manager.close()
    response = await pending
    assert response.outputs["OUTPUT0"][0, 0] == 1
    assert _moves(caplog, "held")[-2:] == [("READY", "UNLOADING"), ("UNLOADING", "UNAVAILABLE")]
    assert manager.ready_versions("held") == []


async def test_close_after_the_drain_grace_ran_out_does_not_wait_again(tmp_path: Path) -> None:
    """Once :meth:`drain` gave up (the server's exit timeout), close unloads at once: the
    request still held fails as unloaded instead of keeping the server from exiting."""
    write_add_sub(tmp_path, "stuck", config=_batched(3_600_000_000))  # held for an hour
    manager, engine = make([tmp_path], ControlMode.EXPLICIT)
    assert await manager.startup(["stuck"]) == {}
    pending = asyncio.create_task(engine.infer(request("stuck")))
    try:
        await _queued(manager, "stuck")
        assert await manager.drain(0.01) is False
    finally:
        await manager.close()
    with pytest.raises(UnavailableError, match="stuck"):
        await pending
