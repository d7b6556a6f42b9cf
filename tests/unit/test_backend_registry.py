"""The backend registry under concurrent loads: each backend is built once, whatever the number
of threads that ask for it at the same time, and a slow one does not hold up the others."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from inferd.backends.base import Backend, LoadContext, LoadedModel
from inferd.backends.registry import BackendRegistry
from inferd.errors import UnavailableError

THREADS = 8


class _Backend:
    platforms: tuple[str, ...] = ()
    default_model_filename = "model.bin"

    def __init__(self, name: str) -> None:
        self.name = name

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        pass

    def load(self, ctx: LoadContext) -> LoadedModel:
        raise NotImplementedError


class _SlowFactory:
    """Builds a backend, lingering until a second builder arrives (or a short while passes),
    so that builds which are not serialised overlap."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.builds = 0
        self._arrived = threading.Condition()

    def __call__(self) -> Backend:
        with self._arrived:
            self.builds += 1
            self._arrived.notify_all()
            self._arrived.wait_for(lambda: self.builds > 1, timeout=0.2)
        return _Backend(self.name)


def test_each_backend_is_materialised_once_under_concurrent_loads() -> None:
    registry = BackendRegistry()
    factories = [_SlowFactory(name) for name in ("a", "b", "c")]
    for factory in factories:
        registry.register_lazy(factory.name, factory)
    start = threading.Barrier(THREADS)

    def load_all(offset: int) -> list[Backend]:
        start.wait()
        names = [f.name for f in factories]
        order = names[offset % 3 :] + names[: offset % 3]
        return [registry.get(name) for name in order]

    with ThreadPoolExecutor(THREADS) as pool:
        seen = [b for got in pool.map(load_all, range(THREADS)) for b in got]
    assert [f.builds for f in factories] == [1, 1, 1]
    for factory in factories:
        assert len({id(b) for b in seen if b.name == factory.name}) == 1


def test_a_slow_backend_does_not_hold_up_another() -> None:
    registry = BackendRegistry()
    release = threading.Event()
    building = threading.Event()

    def slow() -> Backend:
        building.set()
        assert release.wait(10)
        return _Backend("slow")

    registry.register_lazy("slow", slow)
    registry.register_lazy("fast", lambda: _Backend("fast"))
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(registry.get, "slow")
        assert building.wait(10)
        assert registry.get("fast").name == "fast"  # while "slow" is still being built
        release.set()
        assert pending.result(10).name == "slow"


def test_a_failed_build_is_tried_again_on_the_next_load() -> None:
    registry = BackendRegistry()
    attempts: list[int] = []

    def flaky() -> Backend:
        attempts.append(1)
        if len(attempts) == 1:
            raise ImportError("No module named 'flaky_runtime'")
        return _Backend("flaky")

    registry.register_lazy("flaky", flaky, extra="flaky")
    with pytest.raises(UnavailableError, match=r"pip install 'inferd\[flaky\]'"):
        registry.get("flaky")
    assert registry.get("flaky").name == "flaky"
    assert len(attempts) == 2
