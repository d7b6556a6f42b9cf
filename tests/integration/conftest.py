"""The real serving stack for front-end tests: repository manager, ONNX Runtime backend, engine.

Models come from two repositories: the project's example repository (``simple``,
``simple_string``, ...) and a small one of test models built here with ``tests.helpers.models``.
Front ends are started over :func:`start_stack` by each test module, once per module.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop
from onnx import TensorProto

from inferd.backends.registry import default_registry
from inferd.core import datatypes
from inferd.engine import Engine
from inferd.repository.manager import ControlMode, RepositoryManager
from tests.helpers.models import (
    cast_to_int_model,
    identity_model,
    onnx_type,
    spin_model,
    write_add_sub,
    write_model,
)

T = TypeVar("T")

#: Every datatype an ONNX ``Identity`` can round-trip through onnxruntime's Python API.
#: BF16 is missing: onnxruntime cannot take a bfloat16 numpy array as a feed.
ECHO_TYPES = tuple(d for d in datatypes.ALL if d.name != "BF16")

#: What the servers load at startup (explicit control mode); the rest of both repositories
#: stays unloaded for the index and load/unload tests.
LOADED = ("simple", "simple_string", "identity", "echo", "failing", "spin", "toggle")

IDENTITY_CONFIG = """
name: "{name}" platform: "onnxruntime_onnx" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
"""
FAILING_CONFIG = """
name: "{name}" platform: "onnxruntime_onnx" max_batch_size: 0
input [ { name: "X" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""
SPIN_CONFIG = """
name: "{name}" platform: "onnxruntime_onnx" max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


def _echo_config() -> str:
    ins = ", ".join(
        f'{{ name: "IN_{d.name}" data_type: {d.config_name} dims: [ -1 ] }}' for d in ECHO_TYPES
    )
    outs = ", ".join(
        f'{{ name: "OUT_{d.name}" data_type: {d.config_name} dims: [ -1 ] }}' for d in ECHO_TYPES
    )
    return (
        'name: "{name}" platform: "onnxruntime_onnx" max_batch_size: 0 '
        f"input [ {ins} ] output [ {outs} ]"
    )


def build_test_models(repo: Path) -> Path:
    """The test-only models, in Triton's layout."""
    write_model(
        repo,
        "identity",
        identity_model([("INPUT0", "OUTPUT0", TensorProto.STRING)], ["batch", None]),
        IDENTITY_CONFIG,
    )
    echo_pairs = [(f"IN_{d.name}", f"OUT_{d.name}", onnx_type(d)) for d in ECHO_TYPES]
    write_model(repo, "echo", identity_model(echo_pairs, [None]), _echo_config())
    write_model(repo, "failing", cast_to_int_model(), FAILING_CONFIG)
    write_model(repo, "spin", spin_model(), SPIN_CONFIG)
    write_add_sub(repo, "toggle", versions=(2,))
    for name in ("never_loaded", "m2", "x"):
        write_add_sub(repo, name)
    return repo


@pytest.fixture(scope="session")
def serving_roots(example_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The example repository and the test models, built once per session."""
    return [example_repo, build_test_models(tmp_path_factory.mktemp("test_models"))]


@dataclass(slots=True)
class Stack:
    manager: RepositoryManager
    engine: Engine


async def start_stack(roots: Sequence[Path], *, server_version: str) -> Stack:
    """Load :data:`LOADED` from ``roots`` with the default backends (explicit control mode)."""
    manager = RepositoryManager(
        roots, default_registry(), mode=ControlMode.EXPLICIT, allow_model_upload=True
    )
    failures = await manager.startup(LOADED)
    if failures:
        await manager.close()
        raise RuntimeError(f"test models failed to load: {failures}")
    return Stack(manager, Engine(manager, server_version=server_version))


class LoopThread:
    """An event loop on its own thread, as ``inferd serve`` runs one; sync clients block, so a
    server they talk to cannot share the test's loop."""

    def __init__(self, name: str) -> None:
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()


@pytest.fixture(scope="module")
def loop_thread(request: pytest.FixtureRequest) -> Iterator[LoopThread]:
    thread = LoopThread(f"server-{request.module.__name__}")
    try:
        yield thread
    finally:
        thread.close()
