"""The repository manager and engine over real ONNX Runtime models (no network)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np
import pytest

from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest
from inferd.engine import Engine
from inferd.errors import (
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import ControlMode, RepositoryManager
from tests.helpers.models import write_add_sub


def make(
    roots: list[Path], mode: ControlMode = ControlMode.NONE, *, allow_model_upload: bool = False
) -> tuple[RepositoryManager, Engine]:
    manager = RepositoryManager(
        roots,
        default_registry(),
        mode=mode,
        options=LoadOptions(),
        allow_model_upload=allow_model_upload,
    )
    return manager, Engine(manager, server_version="test")


def request(model: str = "simple", version: str = "", batch: int = 1) -> InferRequest:
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    b = np.ones((batch, 16), dtype=np.int32)
    return InferRequest(model, {"INPUT0": a, "INPUT1": b}, model_version=version)


async def test_none_mode_loads_everything_and_infers(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "simple")
    write_add_sub(tmp_path, "other")
    manager, engine = make([tmp_path])
    assert await manager.startup() == {}
    try:
        assert engine.is_ready()
        response = await engine.infer(request(batch=3))
        np.testing.assert_array_equal(
            response.outputs["OUTPUT0"], np.arange(48, dtype=np.int32).reshape(3, 16) + 1
        )
        assert response.model_version == "1"
        index = {(e.name, e.version, e.state) for e in (await engine.repository_index())}
        assert index == {("simple", "1", "READY"), ("other", "1", "READY")}
        with pytest.raises(UnavailableError, match="explicit model load"):
            await engine.load_model("simple")
    finally:
        await manager.close()


async def test_broken_model_is_unavailable_with_reason_and_others_serve(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "simple")
    broken = write_add_sub(tmp_path, "broken")
    (broken / "1" / "model.onnx").write_bytes(b"this is not an onnx file")
    bad_cfg = write_add_sub(tmp_path, "badcfg")
    (bad_cfg / "config.pbtxt").write_text("max_batch_size: -3 bogus_field: 1")
    manager, engine = make([tmp_path])
    failures = await manager.startup()
    try:
        assert set(failures) == {"broken", "badcfg"}
        assert failures["broken"].startswith("failed to load 'broken'")
        states = {e.name: (e.state, e.reason) for e in (await engine.repository_index())}
        assert states["simple"] == ("READY", "")
        assert states["broken"][0] == "UNAVAILABLE"
        assert "broken" in states["broken"][1]
        assert states["badcfg"][0] == "UNAVAILABLE"
        assert "bogus_field" in states["badcfg"][1]
        assert not engine.is_ready()  # strict readiness: not every model is READY
        await engine.infer(request())
        with pytest.raises(NotFoundError, match="Request for unknown model: 'broken'"):
            await engine.infer(request("broken"))
    finally:
        await manager.close()


async def test_unknown_model_and_bad_versions(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "simple")
    manager, engine = make([tmp_path])
    await manager.startup()
    try:
        with pytest.raises(NotFoundError, match=r"^Request for unknown model: 'nope' is not found"):
            await engine.infer(request("nope"))
        with pytest.raises(NotFoundError, match="version 7"):
            await engine.infer(request(version="7"))
        with pytest.raises(InvalidArgumentError, match="failed to get model version"):
            await engine.infer(request(version="abc"))
        assert not engine.model_ready("simple", "7")
        assert engine.model_ready("simple")
    finally:
        await manager.close()


async def test_version_policies(tmp_path: Path) -> None:
    cfg_all = (
        'name: "{name}" platform: "onnxruntime_onnx" max_batch_size: 8 version_policy { all {} }'
    )
    write_add_sub(tmp_path, "all", (1, 2, 3), config=cfg_all)
    write_add_sub(tmp_path, "latest", (1, 2, 3), config=None)
    manager, engine = make([tmp_path])
    await manager.startup()
    try:
        assert manager.ready_versions("all") == [1, 2, 3]
        assert manager.ready_versions("latest") == [3]
        r2 = await engine.infer(request("all", version="2"))
        assert r2.outputs["OUTPUT0"][0, 0] == 0 + 1 + 1  # version 2 adds 1
        latest = await engine.infer(request("all"))
        assert latest.model_version == "3"
        assert engine.model_metadata("all").versions == ["1", "2", "3"]
    finally:
        await manager.close()


async def test_explicit_mode_load_unload_and_overrides(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "simple")
    manager, engine = make([tmp_path], ControlMode.EXPLICIT, allow_model_upload=True)
    await manager.startup([])
    try:
        assert [(e.name, e.version) for e in (await engine.repository_index())] == [
            ("simple", None)
        ]
        with pytest.raises(NotFoundError):
            await engine.infer(request())
        await engine.load_model("simple", config_json='{"max_batch_size":"16"}')
        assert engine.model_config("simple").max_batch_size == 16
        await engine.infer(request(batch=12))
        await engine.unload_model("simple")
        entry = (await engine.repository_index())[0]
        assert (entry.state, entry.reason) == ("UNAVAILABLE", "unloaded")
        assert not engine.model_ready("simple")
        with pytest.raises(NotFoundError, match="failed to load 'missing'"):
            await engine.load_model("missing")
        with pytest.raises(InvalidArgumentError, match="failed to load 'simple'"):
            await engine.load_model("simple", config_json="{not json")
        # a model made entirely of uploaded files
        from tests.helpers.models import add_sub_model

        await engine.load_model(
            "uploaded",
            config_json='{"name": "uploaded", "backend": "onnxruntime", "max_batch_size": 8}',
            files={"1/model.onnx": add_sub_model(5)},
        )
        response = await engine.infer(request("uploaded"))
        assert response.outputs["OUTPUT0"][0, 0] == 0 + 1 + 5
        with pytest.raises(InvalidArgumentError, match=r"invalid load parameter 'file:\.\./x"):
            await engine.load_model(
                "evil", config_json='{"backend": "onnxruntime"}', files={"../x/model.onnx": b"x"}
            )
    finally:
        await manager.close()


async def test_two_roots_and_duplicates(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_add_sub(a, "one")
    write_add_sub(b, "two")
    write_add_sub(a, "dup")
    write_add_sub(b, "dup")
    manager, engine = make([a, b])
    failures = await manager.startup()
    try:
        assert set(failures) == {"dup"}
        assert manager.ready_versions("one") == [1]
        assert manager.ready_versions("two") == [1]
        dup = next(e for e in (await engine.repository_index()) if e.name == "dup")
        assert dup.state == "UNAVAILABLE"
        assert "two or more repositories" in dup.reason
    finally:
        await manager.close()


async def test_poll_reloads_changed_model_without_dropping_requests(tmp_path: Path) -> None:
    model_dir = write_add_sub(tmp_path, "simple")
    manager, engine = make([tmp_path], ControlMode.POLL)
    await manager.startup()
    try:
        assert (await engine.infer(request())).outputs["OUTPUT0"][0, 0] == 1
        stop = asyncio.Event()
        errors: list[BaseException] = []
        seen: set[int] = set()

        async def hammer() -> None:
            while not stop.is_set():
                try:
                    seen.add(int((await engine.infer(request())).outputs["OUTPUT0"][0, 0]))
                except BaseException as exc:  # any failure during the reload is a bug
                    errors.append(exc)
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(hammer()) for _ in range(4)]
        from tests.helpers.models import add_sub_model

        (model_dir / "1" / "model.onnx").write_bytes(add_sub_model(100))
        os.utime(model_dir / "1" / "model.onnx", ns=(1, 1))  # a different stamp for sure
        write_add_sub(tmp_path, "added")
        await manager.poll_once()
        after = await engine.infer(request())
        stop.set()
        await asyncio.gather(*tasks)
        assert errors == []
        assert after.outputs["OUTPUT0"][0, 0] == 101
        assert manager.ready_versions("added") == [1]
        import shutil

        shutil.rmtree(tmp_path / "added")
        await manager.poll_once()
        assert manager.ready_versions("added") == []
    finally:
        await manager.close()


WARMUP = """
model_warmup [
  {
    name: "zeros"
    batch_size: 2
    count: 3
    inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
    inputs { key: "INPUT1" value: { data_type: TYPE_INT32 dims: [ 16 ] random_data: true } }
  }
]
"""


async def test_warmup_runs_before_ready_and_bad_warmup_fails_the_load(tmp_path: Path) -> None:
    from tests.helpers.models import ADD_SUB_CONFIG

    write_add_sub(tmp_path, "warm", config=ADD_SUB_CONFIG + WARMUP)
    bad = WARMUP.replace("dims: [ 16 ] zero_data", "dims: [ 15 ] zero_data")
    write_add_sub(tmp_path, "coldfail", config=ADD_SUB_CONFIG + bad)
    manager, engine = make([tmp_path])
    failures = await manager.startup()
    try:
        assert set(failures) == {"coldfail"}
        assert "warmup 'zeros' failed" in failures["coldfail"]
        stats = engine.model_statistics("warm")[0]
        assert stats.execution_count == 0  # warm-up runs are not user inferences
        await engine.infer(request("warm"))
    finally:
        await manager.close()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ("sequence_batching { iterative_sequence: true }", "iterative_sequence"),
        (
            "sequence_batching { oldest { preserve_ordering: true } }",
            "oldest.preserve_ordering",
        ),
        ('model_repository_agents { agents [ { name: "checksum" } ] }', "model_repository_agents"),
        ("instance_group [ { rate_limiter { priority: 1 } } ]", "rate_limiter"),
    ],
)
async def test_unsupported_features_are_refused_by_name(
    tmp_path: Path, extra: str, named: str
) -> None:
    from tests.helpers.models import ADD_SUB_CONFIG

    write_add_sub(tmp_path, "m", config=ADD_SUB_CONFIG + extra)
    manager, _ = make([tmp_path])
    failures = await manager.startup()
    try:
        assert named in failures["m"]
        assert "does not support" in failures["m"]
    finally:
        await manager.close()


@pytest.mark.parametrize("mode", [ControlMode.EXPLICIT, ControlMode.POLL])
async def test_reloads_keep_metadata_and_statistics_consistent(
    tmp_path: Path, mode: ControlMode
) -> None:
    """What a load generator does while the model is reloaded under it: read the metadata
    (its versions), read the statistics, infer, read the statistics again. Every step must
    succeed, and the counters of the version that served must have grown (perf_analyzer
    otherwise stops with "failed to find the requested model version")."""
    model_dir = write_add_sub(tmp_path, "simple")
    manager, engine = make([tmp_path], mode)
    await manager.startup(["simple"])
    try:
        for _ in range(8):
            await engine.infer(request())
        stop = asyncio.Event()
        problems: list[str] = []

        def counts() -> dict[str, int]:
            return {s.version: s.queue.count for s in engine.model_statistics("simple")}

        async def load_generator() -> None:
            while not stop.is_set():
                try:
                    versions = engine.model_metadata("simple").versions
                    if not versions:
                        problems.append("metadata lists no version")
                    before = counts()
                    await engine.infer(request())
                    after = counts()
                except Exception as exc:  # any failure during a reload is a bug
                    problems.append(repr(exc))
                    continue
                grown = [v for v, n in after.items() if n > before.get(v, 0)]
                if not grown:
                    problems.append(f"no version's queue count grew: {before} -> {after}")

        clients = [asyncio.create_task(load_generator()) for _ in range(8)]
        for round_ in range(4):
            if mode is ControlMode.EXPLICIT:
                await engine.load_model("simple")
            else:
                os.utime(model_dir / "1" / "model.onnx", ns=(round_ + 1, round_ + 1))
                await manager.poll_once()
            for _ in range(4):
                await asyncio.sleep(0)
        stop.set()
        await asyncio.gather(*clients)
        assert problems == []
        total = sum(s.inference_count for s in engine.model_statistics("simple"))
        assert total >= 8
    finally:
        await manager.close()


async def test_a_load_cannot_ask_for_more_instances_than_the_server_allows(
    tmp_path: Path,
) -> None:
    """A config override over the network must not start a thousand workers."""
    write_add_sub(tmp_path, "simple")
    manager = RepositoryManager(
        [tmp_path],
        default_registry(),
        mode=ControlMode.EXPLICIT,
        options=LoadOptions(max_instances=8),
    )
    engine = Engine(manager, server_version="test")
    await manager.startup(["simple"])
    try:
        override = '{"instance_group": [{"kind": "KIND_CPU", "count": 5}, {"count": 876}]}'
        with pytest.raises(InvalidArgumentError, match=r"881 instances, more than the 8 a load"):
            await engine.load_model("simple", config_json=override)
        # the version that was serving still serves, with its own instances
        response = await engine.infer(request())
        assert response.model_version == "1"
        await engine.load_model("simple", config_json='{"instance_group": [{"count": 8}]}')
        assert (await engine.infer(request())).model_version == "1"
    finally:
        await manager.close()
