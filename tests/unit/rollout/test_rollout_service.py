"""The server's policies without a server: policy files read as models load, unload and wait
for the other models they name; live policies routing, counting and comparing answers through a
runner that stands for the engine."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.errors import InvalidArgumentError, NotFoundError
from inferd.repository.manager_types import ServingModel
from inferd.rollout.service import POLICY_FILE, Rollout
from inferd.scheduling.stats import ModelStats
from inferd.testing import FakeClock

CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "probs" data_type: TYPE_FP32 dims: [ 3 ] }} ]
"""
OTHER_SHAPE = CONFIG.replace("dims: [ 4 ]", "dims: [ 5 ]")


class _Manager:
    def __init__(self) -> None:
        self.models: dict[str, dict[int, ServingModel]] = {}

    def add(self, name: str, versions: tuple[int, ...], config: str = CONFIG) -> None:
        spec = spec_from_proto(parse_pbtxt(config.format(name=name), name))
        self.models[name] = {
            v: ServingModel(spec, v, scheduler=None, stats=ModelStats(name, v))  # type: ignore[arg-type]
            for v in versions
        }

    def get(self, name: str, version: int | None) -> ServingModel:
        versions = self.models.get(name)
        if not versions:
            raise NotFoundError(f"Request for unknown model: '{name}' is not found")
        if version is None:
            return versions[max(versions)]
        if version not in versions:
            raise NotFoundError(f"Request for unknown model: '{name}' version {version}")
        return versions[version]


def _rollout() -> tuple[Rollout, _Manager]:
    manager = _Manager()
    manager.add("m", (1, 2, 3))
    return Rollout(manager, clock=FakeClock()), manager  # type: ignore[arg-type]


def _write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / POLICY_FILE).write_text(text)
    return folder


SPLIT = "kind: split\nvariants: [{version: 1, weight: 1}, {version: 2, weight: 1}]\n"


async def test_a_policy_file_is_read_and_kept_across_equal_reloads(tmp_path: Path) -> None:
    rollout, _ = _rollout()
    folder = _write(tmp_path / "m", SPLIT)
    await rollout.model_changed("m", folder)
    live = rollout.routes["m"]
    assert live.policy.kind == "split"
    await rollout.model_changed("m", folder)
    assert rollout.routes["m"] is live  # the same policy: its figures go on
    _write(folder, SPLIT.replace("weight: 1}]", "weight: 3}]"))
    await rollout.model_changed("m", folder)
    assert rollout.routes["m"] is not live
    await rollout.model_changed("m", None)
    assert "m" not in rollout.routes


async def test_a_wrong_file_leaves_the_model_without_a_policy(tmp_path: Path) -> None:
    rollout, _ = _rollout()
    folder = _write(tmp_path / "m", SPLIT)
    await rollout.model_changed("m", folder)
    _write(folder, "kind: split\nvariants: [{version: 1, weight: 1}, {version: 7, weight: 1}]")
    with pytest.raises(InvalidArgumentError) as caught:
        await rollout.model_changed("m", folder)
    message = str(caught.value)
    assert message.startswith("model 'm' serves without a traffic policy: ")
    assert str(folder / POLICY_FILE) in message
    assert "variants[1]: Request for unknown model: 'm' version 7" in message
    assert "m" not in rollout.routes
    _write(folder, "kind: split\nvariants: [")
    with pytest.raises(InvalidArgumentError, match="not valid YAML"):
        await rollout.model_changed("m", folder)


async def test_a_reload_without_a_file_keeps_a_policy_that_still_applies(tmp_path: Path) -> None:
    rollout, manager = _rollout()
    rollout.set("m", {"kind": "shadow", "shadow": {"version": 2}})
    folder = tmp_path / "m"
    folder.mkdir()
    await rollout.model_changed("m", folder)
    assert "m" in rollout.routes
    manager.add("m", (1, 3))  # version 2 is gone
    await rollout.model_changed("m", folder)
    assert "m" not in rollout.routes


async def test_a_policy_waits_for_the_other_model_it_names(tmp_path: Path) -> None:
    rollout, manager = _rollout()
    folder = _write(tmp_path / "m", "kind: shadow\nshadow: {model: m2}\n")
    await rollout.model_changed("m", folder)
    assert "m" not in rollout.routes
    with pytest.raises(NotFoundError, match="waits for model 'm2' to load"):
        rollout.show("m")
    manager.add("m2", (1,), OTHER_SHAPE)
    await rollout.model_changed("m2", tmp_path / "m2")  # loads, but its input differs
    assert "m" not in rollout.routes
    with pytest.raises(NotFoundError, match="has no traffic policy"):
        rollout.show("m")
    manager.add("m2", (1,))
    await rollout.model_changed("m", folder)
    await rollout.model_changed("m2", tmp_path / "m2")
    assert rollout.routes["m"].policy.names == ("latest", "m2")


def test_the_admin_api_checks_what_it_is_given() -> None:
    rollout, manager = _rollout()
    manager.add("wide", (1,), OTHER_SHAPE)
    with pytest.raises(InvalidArgumentError, match="input 'x' is FP32 \\[4\\] vs FP32 \\[5\\]"):
        rollout.set("m", {"kind": "shadow", "shadow": {"model": "wide", "version": 1}})
    with pytest.raises(InvalidArgumentError, match="shadow: Request for unknown model: 'gone'"):
        rollout.set("m", {"kind": "shadow", "shadow": {"model": "gone"}})
    with pytest.raises(NotFoundError):
        rollout.set("nothing", {"kind": "shadow", "shadow": {"version": 2}})
    with pytest.raises(NotFoundError, match="has no traffic policy"):
        rollout.clear("m")
    report = rollout.set("m", {"kind": "split", "variants": [
        {"version": 1, "weight": 1}, {"version": 3, "weight": 3}]})  # fmt: skip
    assert [v["share"] for v in report["variants"]] == [0.25, 0.75]
    with pytest.raises(InvalidArgumentError, match="applies to canary policies"):
        rollout.promote("m")
    with pytest.raises(InvalidArgumentError, match="takes no feedback"):
        rollout.feedback("m", "id", 1.0)


# -- live policies ---------------------------------------------------------------------------------


def _probs(version: int, rows: int) -> dict[str, np.ndarray]:
    """Version 1 says class 0, version 2 class 1, for every row."""
    out = np.full((rows, 3), 0.1, np.float32)
    out[:, version - 1] = 0.8
    return {"probs": out}


def _request(**parameters: Any) -> InferRequest:
    return InferRequest("m", {"x": np.zeros((2, 4), np.float32)}, parameters=parameters)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_canary_that_answers_differently_is_rolled_back() -> None:
    rollout, _ = _rollout()
    seen: list[tuple[str, int | None]] = []

    async def runner(
        request: InferRequest, model: str, version: int | None, observe: bool
    ) -> Mapping[str, np.ndarray]:
        seen.append((model, version))
        return _probs(version or 3, 2)

    rollout.attach(runner)
    rollout.set("m", {"kind": "canary", "primary": {"version": 1}, "candidate": {"version": 2},
                      "stages": [0.5, 1.0], "min_requests": 100, "max_disagreement": 0.2,
                      "seed": 4})  # fmt: skip
    live = rollout.routes["m"]
    for _ in range(200):
        call = live.route(_request())
        call.answered(_probs(call.version or 3, 2))
        await _settle()
    report = rollout.show("m")
    canary = report["canary"]
    assert canary["status"] == "rolled_back"
    assert canary["reason"].startswith("disagreement 100.0% (20 of 20 compared) > 20.0%")
    assert seen == [("m", 1)] * 20  # the primary ran beside each candidate answer
    candidate = report["variants"][1]
    assert candidate["mirrored"]["compared"] == 20
    assert candidate["mirrored"]["agreement"] == 0.0
    assert canary["share"] == 0.0
    assert {live.route(_request()).variant for _ in range(20)} == {"v1"}
    stats = rollout.statistics().policies[0]
    assert (stats.canary_stage, stats.canary_rollbacks) == (0, 1)
    rollout.set("m", {"kind": "split", "variants": [
        {"version": 1, "weight": 1}, {"version": 2, "weight": 1}]})  # fmt: skip
    assert rollout.statistics().policies[0].canary_rollbacks == 1  # kept for the model
    await rollout.close()


async def test_a_shadow_counts_answers_failures_and_its_bound() -> None:
    rollout, _ = _rollout()
    gate = asyncio.Event()

    async def runner(
        request: InferRequest, model: str, version: int | None, observe: bool
    ) -> Mapping[str, np.ndarray]:
        assert request.parameters["variant"] == "v3"
        assert request.model_version == "3"
        await gate.wait()
        if request.parameters.get("fail"):
            raise InvalidArgumentError("no")
        return _probs(1, 2)

    rollout.attach(runner)
    rollout.set("m", {"kind": "shadow", "primary": {"version": 1}, "shadow": {"version": 3},
                      "max_in_flight": 2, "batch": 1})  # fmt: skip
    live = rollout.routes["m"]
    for fail in (False, True, False):
        call = live.route(_request(fail=fail))
        assert (call.variant, call.version) == ("v1", 1)
        call.answered(_probs(1, 2))
    await _settle()
    mirrored = rollout.show("m")["variants"][1]["mirrored"]
    assert (mirrored["requests"], mirrored["skipped"]) == (0, 1)  # two run, one skipped
    gate.set()
    await _settle()
    shadow = rollout.show("m")["variants"][1]
    assert shadow["mirrored"]["requests"] == 2
    assert shadow["mirrored"]["errors"] == 1
    assert shadow["mirrored"]["agreement"] == 1.0
    assert shadow["errors"] == 1
    await rollout.close()


async def test_a_shadow_starts_its_copies_a_batch_at_a_time() -> None:
    rollout, _ = _rollout()
    running: list[int] = []  # how many copies were running when each one started
    gate = asyncio.Event()

    async def runner(
        request: InferRequest, model: str, version: int | None, observe: bool
    ) -> Mapping[str, np.ndarray]:
        running.append(len(running) + 1)
        await gate.wait()
        return _probs(2, 2)

    rollout.attach(runner)
    rollout.set("m", {"kind": "shadow", "shadow": {"version": 2}, "batch": 3,
                      "batch_delay_ms": 10_000})  # fmt: skip
    live = rollout.routes["m"]
    for _ in range(2):
        live.route(_request()).answered(_probs(1, 2))
    await _settle()
    assert running == []  # gathered, waiting for the third
    live.route(_request()).answered(_probs(1, 2))
    await _settle()
    assert running == [1, 2, 3]  # all three submitted together
    gate.set()
    await _settle()
    mirrored = rollout.show("m")["variants"][1]["mirrored"]
    assert (mirrored["requests"], mirrored["compared"], mirrored["agreement"]) == (3, 3, 0.0)
    await rollout.close()


@pytest.mark.parametrize("how", ["replaced", "cleared"])
async def test_copies_gathered_by_a_policy_that_goes_are_never_started(how: str) -> None:
    rollout, _ = _rollout()
    started: list[int] = []

    async def runner(
        request: InferRequest, model: str, version: int | None, observe: bool
    ) -> Mapping[str, np.ndarray]:
        started.append(version or 0)
        return _probs(1, 2)

    rollout.attach(runner)
    rollout.set("m", {"kind": "shadow", "shadow": {"version": 2}, "batch": 8,
                      "batch_delay_ms": 30})  # fmt: skip
    old = rollout.routes["m"]
    for _ in range(3):
        old.route(_request()).answered(_probs(1, 2))
    assert old.in_flight == 3
    if how == "replaced":
        rollout.set("m", {"kind": "shadow", "shadow": {"version": 1}, "batch": 1})
    else:
        rollout.clear("m")
    assert old.in_flight == 0
    await asyncio.sleep(0.1)  # past the old policy's delay
    assert started == []
    if how == "replaced":  # the new policy mirrors as it should
        rollout.routes["m"].route(_request()).answered(_probs(1, 2))
        await _settle()
        assert started == [1]
    await rollout.close()


async def test_a_partial_batch_of_copies_starts_after_the_delay() -> None:
    rollout, _ = _rollout()
    started: list[float] = []

    async def runner(
        request: InferRequest, model: str, version: int | None, observe: bool
    ) -> Mapping[str, np.ndarray]:
        started.append(asyncio.get_running_loop().time())
        return _probs(1, 2)

    rollout.attach(runner)
    rollout.set("m", {"kind": "shadow", "shadow": {"version": 2}, "batch": 8,
                      "batch_delay_ms": 50})  # fmt: skip
    live = rollout.routes["m"]
    answered = asyncio.get_running_loop().time()
    live.route(_request()).answered(_probs(1, 2))
    await _settle()
    assert started == []
    for _ in range(100):
        if started:
            break
        await asyncio.sleep(0.01)
    assert len(started) == 1
    assert started[0] - answered >= 0.045
    await _settle()
    assert rollout.show("m")["variants"][1]["mirrored"]["agreement"] == 1.0
    await rollout.close()


async def test_feedback_reaches_the_variant_that_answered() -> None:
    rollout, _ = _rollout()
    halves = [{"version": 1, "weight": 1}, {"version": 2, "weight": 1}]
    rollout.set("m", {"kind": "split", "sticky_key": "user", "feedback": {}, "variants": halves})
    live = rollout.routes["m"]
    routed: dict[str, str] = {}
    for user in range(40):
        request = _request(user=f"u{user}")
        call = live.route(request)
        assert request.id  # given by the server: the policy takes feedback
        call.answered(_probs(1, 2))
        routed[request.id] = call.variant
        again = live.route(_request(user=f"u{user}"))
        assert again.variant == call.variant  # sticky
    assert set(routed.values()) == {"v1", "v2"}
    for request_id, variant in routed.items():
        answer = rollout.feedback("m", request_id, 1.0 if variant == "v2" else 0.0)
        assert answer["variant"] == variant
    with pytest.raises(NotFoundError, match="already rewarded"):
        rollout.feedback("m", next(iter(routed)), 1.0)
    with pytest.raises(InvalidArgumentError, match=r"\[0, 1\]"):
        rollout.feedback("m", "whatever", 3.0)
    comparison = rollout.show("m")["comparison"]
    assert comparison["baseline"] == "v1"
    assert comparison["candidates"]["v2"]["p_better"] > 0.99
    failed = live.route(_request())
    failed.failed(InvalidArgumentError("bad input"))
    variants = {v.name: v for v in rollout.statistics().policies[0].variants}
    assert variants[failed.variant].errors == 1
