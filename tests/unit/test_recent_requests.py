"""The ring of recent requests per model (kept by reference, bounded) and the warm-up that runs
them on a new version's instances."""

from __future__ import annotations

import dataclasses
import mmap
from collections.abc import Sequence

import numpy as np
import pytest

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import InvalidArgumentError, ModelLoadError
from inferd.repository.recent import RecentRequests
from inferd.repository.warmup import warm_up_with_requests

MODEL = """
name: "%s" max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
SEQUENCE = """
sequence_batching { control_input [
  { name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }
"""


def _spec(name: str = "m", extra: str = "", text: str = MODEL) -> ModelSpec:
    return spec_from_proto(parse_pbtxt(text % name + extra, f"{name}/config.pbtxt"))


def _request(value: float, rows: int = 1, name: str = "X") -> InferRequest:
    return InferRequest("m", {name: np.full((rows, 2), value, np.float32)})


def test_the_last_requests_are_kept_per_model_by_reference() -> None:
    ring = RecentRequests(3)
    spec_a, spec_b = _spec("a"), _spec("b")
    sent = [_request(float(i)) for i in range(5)]
    for request in sent:
        ring.observe(spec_a, 1, request, {})
    other = _request(99.0)
    ring.observe(spec_b, 1, other, {})
    kept = ring.sample("a")
    assert [id(r) for r in kept] == [id(r) for r in sent[2:]]  # the same objects, oldest first
    assert all(k.inputs["X"] is s.inputs["X"] for k, s in zip(kept, sent[2:], strict=True))
    assert ring.sample("b") == [other]
    assert ring.sample("unknown") == []
    ring.forget("a")
    assert ring.sample("a") == []


def test_sequence_models_ensembles_and_large_requests_are_not_kept() -> None:
    ring = RecentRequests(4, max_request_bytes=64)
    ring.observe(_spec("seq", SEQUENCE), 1, _request(1.0), {})
    assert ring.sample("seq") == []
    ensemble = dataclasses.replace(_spec("ens"), is_ensemble=True)
    ring.observe(ensemble, 1, _request(1.0), {})
    assert ring.sample("ens") == []
    spec = _spec("m")
    ring.observe(spec, 1, _request(1.0, rows=4), {})  # 32 bytes: kept
    ring.observe(spec, 1, _request(2.0, rows=16), {})  # 128 bytes: not kept
    assert [r.inputs["X"].shape for r in ring.sample("m")] == [(4, 2)]


def test_requests_reading_a_clients_shared_memory_are_left_out() -> None:
    ring = RecentRequests(4)
    spec = _spec()
    region = mmap.mmap(-1, 64)
    in_region = InferRequest(
        "m", {"X": np.frombuffer(memoryview(region)[:8], np.float32).reshape(1, 2)}
    )
    in_body = InferRequest("m", {"X": np.frombuffer(bytes(8), np.float32).reshape(1, 2)})
    ring.observe(spec, 1, in_region, {})
    ring.observe(spec, 1, in_body, {})
    assert ring.sample("m") == [in_body]
    del in_region, ring
    region.close()


def test_the_ring_refuses_a_size_of_zero() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RecentRequests(0)


class _Recorder:
    def __init__(self, fail_on: float | None = None) -> None:
        self.ran: list[float] = []
        self.fail_on = fail_on

    def execute(self, requests: Sequence[InferRequest]) -> list[object]:
        (request,) = requests
        value = float(request.inputs["X"].flat[0])
        self.ran.append(value)
        if value == self.fail_on:
            return [InvalidArgumentError("the model cannot take this value")]
        return [{"Y": request.inputs["X"]}]

    def close(self) -> None:
        return None


def test_warm_up_runs_every_fitting_request_on_every_instance() -> None:
    instances = [_Recorder(), _Recorder()]
    requests = [_request(1.0), _request(2.0, rows=8), _request(3.0, name="OLD"), _request(4.0)]
    ran = warm_up_with_requests(_spec(), instances, requests)  # type: ignore[arg-type]
    # 8 rows exceed max_batch_size 4 and OLD is not an input any more: both left out
    assert ran == 2
    assert [i.ran for i in instances] == [[1.0, 4.0], [1.0, 4.0]]


def test_a_request_the_new_version_fails_on_fails_the_warm_up() -> None:
    requests = [_request(1.0), _request(2.0)]
    with pytest.raises(ModelLoadError, match="recent request 2 of 2 failed: the model cannot"):
        warm_up_with_requests(_spec(), [_Recorder(fail_on=2.0)], requests)  # type: ignore[arg-type]
