"""The response cache stores a model's raw outputs and shaping runs once, after the observers.

A model with ``response_cache { enable: true }`` on a server with a cache: an observer sees the
raw FP32 arrays and every output even when the client asked for one output as classes; an
identical request that asks for other outputs or another ``class_count`` is answered from the
same entry (a hit, the model does not run), shaped as it asks; the streaming entry (gRPC
streams, models calling models) shapes the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from inferd.core.inference import InferRequest, RequestedOutput
from inferd.core.model_spec import ModelSpec
from inferd.repository.manager import ControlMode
from inferd.server.config import ServerConfig
from inferd.server.server import Server
from tests.helpers.models import finish, write_model

Arr = np.ndarray[Any, Any]

CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "PROB" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" },
  { name: "AUX" data_type: TYPE_FP32 dims: [ 4 ] }
]
response_cache { enable: true }
"""
LABELS = ["cat", "dog", "owl", "fox"]
X = np.array([[0.1, 0.7, 0.15, 0.05]], dtype=np.float32)


def _model() -> bytes:
    """PROB = INPUT, AUX = -INPUT (FP32, [-1, 4])."""
    shape: list[str | int | None] = ["batch", 4]
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["INPUT"], ["PROB"]),
            helper.make_node("Neg", ["INPUT"], ["AUX"]),
        ],
        "prob_aux",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("PROB", "AUX")],
    )
    return finish(graph)


class Recorder:
    def __init__(self) -> None:
        self.seen: list[dict[str, Arr]] = []

    def observe(
        self, spec: ModelSpec, version: int, request: InferRequest, outputs: Mapping[str, Arr]
    ) -> None:
        self.seen.append(dict(outputs))


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Server, Recorder]]:
    model_dir = write_model(tmp_path, "classes", _model(), CONFIG)
    (model_dir / "labels.txt").write_text("\n".join(LABELS) + "\n")
    recorder = Recorder()
    config = ServerConfig(
        model_repositories=(tmp_path,),
        model_control_mode=ControlMode.EXPLICIT,
        load_models=("classes",),
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        response_cache_bytes=1 << 20,
    )
    server = Server(config, observers=(recorder,))
    await server.start()
    try:
        yield server, recorder
    finally:
        await server.stop()


def _request(*outputs: RequestedOutput) -> InferRequest:
    return InferRequest(
        model_name="classes", inputs={"INPUT": X.copy()}, outputs=list(outputs) or None
    )


def _hits_and_misses(server: Server) -> tuple[int, int]:
    assert server.response_cache is not None
    stats = server.response_cache.statistics()
    return stats.hits, stats.misses


async def test_an_observer_sees_raw_outputs_of_a_cached_classification_request(
    served: tuple[Server, Recorder],
) -> None:
    server, recorder = served
    response = await server.engine.infer(_request(RequestedOutput("PROB", classification=2)))
    assert list(response.outputs) == ["PROB"]
    np.testing.assert_array_equal(
        response.outputs["PROB"], [[b"0.700000:1:dog", b"0.150000:2:owl"]]
    )
    assert _hits_and_misses(server) == (0, 1)
    # a hit: the observer again sees the raw arrays, never the classes
    await server.engine.infer(_request(RequestedOutput("PROB", classification=1)))
    assert _hits_and_misses(server) == (1, 1)
    assert len(recorder.seen) == 2
    for outputs in recorder.seen:
        assert set(outputs) == {"PROB", "AUX"}
        assert outputs["PROB"].dtype == np.float32
        np.testing.assert_array_equal(outputs["PROB"], X)
        np.testing.assert_array_equal(outputs["AUX"], -X)


async def test_a_hit_answers_any_selection_and_class_count_from_the_raw_entry(
    served: tuple[Server, Recorder],
) -> None:
    server, _ = served
    engine = server.engine
    first = await engine.infer(_request(RequestedOutput("AUX")))  # the miss asks for AUX only
    assert list(first.outputs) == ["AUX"]
    everything = await engine.infer(_request())
    assert list(everything.outputs) == ["PROB", "AUX"]  # model order
    np.testing.assert_array_equal(everything.outputs["PROB"], X)
    np.testing.assert_array_equal(everything.outputs["AUX"], -X)
    reordered = await engine.infer(
        _request(
            RequestedOutput("AUX", classification=1), RequestedOutput("PROB", classification=3)
        )
    )
    assert list(reordered.outputs) == ["AUX", "PROB"]  # the request's order
    np.testing.assert_array_equal(reordered.outputs["AUX"], [[b"-0.050000:3"]])  # no labels
    np.testing.assert_array_equal(
        reordered.outputs["PROB"], [[b"0.700000:1:dog", b"0.150000:2:owl", b"0.100000:0:cat"]]
    )
    assert _hits_and_misses(server) == (2, 1)  # the model ran once
    stats = engine.model_statistics("classes")[0]
    assert stats.execution_count == 1


async def test_a_streamed_request_is_shaped_from_the_same_entry(
    served: tuple[Server, Recorder],
) -> None:
    server, _ = served
    await server.engine.infer(_request())
    events = [
        e
        async for e in server.engine.stream_infer(
            _request(RequestedOutput("PROB", classification=2))
        )
    ]
    assert len(events) == 1
    assert events[0].final
    assert events[0].response is not None
    np.testing.assert_array_equal(
        events[0].response.outputs["PROB"], [[b"0.700000:1:dog", b"0.150000:2:owl"]]
    )
    assert _hits_and_misses(server) == (1, 1)
