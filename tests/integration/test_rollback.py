"""Rollback, pin and unpin, and warm-up from recent requests, in the repository manager over real
ONNX Runtime models (no network)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest
from inferd.engine import Engine
from inferd.errors import InvalidArgumentError, ModelLoadError, NotFoundError, UnavailableError
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import ControlMode, RepositoryManager
from inferd.repository.recent import RecentRequests
from tests.helpers.models import finish, write_add_sub, write_model

Index = dict[str, tuple[str, str]]


def make(
    root: Path, mode: ControlMode, recent: RecentRequests | None = None
) -> tuple[RepositoryManager, Engine]:
    manager = RepositoryManager(
        [root], default_registry(), mode=mode, options=LoadOptions(), recent=recent
    )
    observers = [recent] if recent is not None else []
    return manager, Engine(manager, server_version="test", observers=observers)


def add_sub_request(version: str = "") -> InferRequest:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    return InferRequest("m", {"INPUT0": a, "INPUT1": a}, model_version=version)


async def served(engine: Engine) -> tuple[str, int]:
    """The version a request without one gets, and its OUTPUT0 offset (version v adds v - 1)."""
    response = await engine.infer(add_sub_request())
    offset = int(response.outputs["OUTPUT0"][0, 0])  # 0 + 0 + offset
    return response.model_version, offset


async def index(engine: Engine) -> Index:
    return {e.version or "": (e.state or "", e.reason) for e in await engine.repository_index()}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    write_add_sub(root, "m", versions=(1, 2, 3))  # the default policy serves version 3
    return root


async def test_rollback_pins_the_previous_version_until_a_load(repo: Path) -> None:
    manager, engine = make(repo, ControlMode.EXPLICIT)
    await manager.startup(["m"])
    try:
        assert await served(engine) == ("3", 2)
        pin = await engine.rollback_model("m")
        assert (pin.version, pin.rolled_back_from) == (2, 3)
        assert await served(engine) == ("2", 1)
        assert manager.ready_versions("m") == [2]
        states = await index(engine)
        assert states["3"] == ("UNAVAILABLE", "unloaded: rolled back to 2")
        assert states["2"][0] == "READY"
        assert "rollback from version 3" in states["2"][1]
        assert "inferd model unpin m" in states["2"][1]

        pin = await engine.rollback_model("m")  # again: the next one down
        assert (pin.version, pin.rolled_back_from) == (1, 2)
        assert await served(engine) == ("1", 0)
        with pytest.raises(InvalidArgumentError, match="no version below its default version 1"):
            await engine.rollback_model("m")

        await engine.load_model("m")  # an explicit load applies the version policy again
        assert await served(engine) == ("3", 2)
        assert (await index(engine))["3"] == ("READY", "")
        with pytest.raises(InvalidArgumentError, match="'m' is not pinned"):
            await engine.unpin_model("m")
    finally:
        await manager.close()


async def test_rollback_to_a_named_version_and_unpin(repo: Path) -> None:
    manager, engine = make(repo, ControlMode.EXPLICIT)
    await manager.startup(["m"])
    try:
        with pytest.raises(NotFoundError, match="no such version"):
            await engine.rollback_model("m", 7)
        with pytest.raises(InvalidArgumentError, match="already the default"):
            await engine.rollback_model("m", 3)
        assert await served(engine) == ("3", 2)  # refusals changed nothing
        await engine.rollback_model("m", 1)
        assert await served(engine) == ("1", 0)
        await engine.unpin_model("m")
        assert await served(engine) == ("3", 2)
        assert manager.ready_versions("m") == [3]
        assert (await index(engine))["1"] == ("UNAVAILABLE", "unloaded")
        with pytest.raises(NotFoundError, match="no loaded version"):
            await engine.rollback_model("nope")
    finally:
        await manager.close()


async def test_polling_leaves_a_pinned_model_alone_until_it_is_unpinned(repo: Path) -> None:
    manager, engine = make(repo, ControlMode.POLL)
    await manager.startup()
    try:
        await engine.rollback_model("m")
        write_add_sub(repo, "m", versions=(4,))  # a new version appears
        await manager.poll_once()
        assert await served(engine) == ("2", 1)
        assert manager.ready_versions("m") == [2]
        await engine.unpin_model("m")
        assert await served(engine) == ("4", 3)
        await manager.poll_once()  # the unpin's load left nothing for the next scan
        assert await served(engine) == ("4", 3)
    finally:
        await manager.close()


async def test_a_poll_that_overlaps_a_rollback_does_not_undo_it(repo: Path) -> None:
    manager, engine = make(repo, ControlMode.POLL)
    await manager.startup()
    try:
        write_add_sub(repo, "m", versions=(4,))
        # the poll finds version 4 while the rollback loads version 2 under the model's lock
        await asyncio.gather(engine.rollback_model("m"), manager.poll_once())
        assert await served(engine) == ("2", 1)
        assert manager.ready_versions("m") == [2]
    finally:
        await manager.close()


async def test_rollback_and_unpin_are_refused_in_mode_none(repo: Path) -> None:
    manager, engine = make(repo, ControlMode.NONE)
    await manager.startup()
    try:
        with pytest.raises(UnavailableError, match="poll or explicit to roll a model back"):
            await engine.rollback_model("m")
        with pytest.raises(UnavailableError, match="poll or explicit to unpin a model"):
            await engine.unpin_model("m")
        assert await served(engine) == ("3", 2)
    finally:
        await manager.close()


async def test_a_version_that_fails_to_load_leaves_the_default_serving(repo: Path) -> None:
    (repo / "m" / "2" / "model.onnx").write_bytes(b"not an onnx model")
    manager, engine = make(repo, ControlMode.EXPLICIT)
    await manager.startup(["m"])
    try:
        with pytest.raises(ModelLoadError, match="failed to load 'm' version 2"):
            await engine.rollback_model("m")
        assert await served(engine) == ("3", 2)
        states = await index(engine)
        assert states["3"] == ("READY", "")
        assert states["2"][0] == "UNAVAILABLE"
        assert "failed to load 'm' version 2" in states["2"][1]
        with pytest.raises(InvalidArgumentError, match="not pinned"):
            await engine.unpin_model("m")
    finally:
        await manager.close()


# -- warm-up from recent requests -------------------------------------------------------------

GATHER_CONFIG = """
name: "g" platform: "onnxruntime_onnx" max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_INT64 dims: [ -1 ] } ]
"""


def identity_int64() -> bytes:
    x = helper.make_tensor_value_info("X", TensorProto.INT64, [None])
    y = helper.make_tensor_value_info("Y", TensorProto.INT64, [None])
    return finish(helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "id", [x], [y]))


def gather_int64() -> bytes:
    """Y = TABLE[X] for a table of 4: an index of 4 or more fails inside onnxruntime."""
    table = numpy_helper.from_array(np.arange(10, 14, dtype=np.int64), "TABLE")
    x = helper.make_tensor_value_info("X", TensorProto.INT64, [None])
    y = helper.make_tensor_value_info("Y", TensorProto.INT64, [None])
    node = helper.make_node("Gather", ["TABLE", "X"], ["Y"])
    return finish(helper.make_graph([node], "gather", [x], [y], initializer=[table]))


async def test_a_new_version_runs_the_recent_requests_before_it_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "models"
    write_model(root, "g", identity_int64(), GATHER_CONFIG, versions=(1,))
    recent = RecentRequests(3)
    manager, engine = make(root, ControlMode.EXPLICIT, recent)
    await manager.startup(["g"])
    try:
        for value in (0, 1, 2, 3, 2):
            await engine.infer(InferRequest("g", {"X": np.array([value], np.int64)}))
        assert [int(r.inputs["X"][0]) for r in recent.sample("g")] == [2, 3, 2]
        write_model(root, "g", gather_int64(), None, versions=(2,))
        with caplog.at_level(logging.INFO, logger="inferd.repository"):
            await engine.load_model("g")
        assert "model 'g' version 2 warmed up with 3 recent request(s)" in caplog.text
        response = await engine.infer(InferRequest("g", {"X": np.array([1], np.int64)}))
        assert (response.model_version, int(response.outputs["Y"][0])) == ("2", 11)
    finally:
        await manager.close()


async def test_a_version_that_fails_its_warm_up_never_serves(tmp_path: Path) -> None:
    root = tmp_path / "models"
    write_model(root, "g", identity_int64(), GATHER_CONFIG, versions=(1,))
    recent = RecentRequests(8)
    manager, engine = make(root, ControlMode.EXPLICIT, recent)
    await manager.startup(["g"])
    try:
        for value in (1, 9):  # 9 is out of version 2's table
            await engine.infer(InferRequest("g", {"X": np.array([value], np.int64)}))
        write_model(root, "g", gather_int64(), None, versions=(2,))
        with pytest.raises(InvalidArgumentError, match="warm-up with recent request 2 of 2"):
            await engine.load_model("g")
        response = await engine.infer(InferRequest("g", {"X": np.array([9], np.int64)}))
        assert (response.model_version, int(response.outputs["Y"][0])) == ("1", 9)
        states = await index(engine)
        assert states["1"] == ("READY", "")
        assert states["2"][0] == "UNAVAILABLE"
        assert "warm-up with recent request 2 of 2 failed" in states["2"][1]
    finally:
        await manager.close()
