"""An ensemble with a decoupled step, end to end, as Triton serves one: the ensemble becomes
decoupled, each response of the decoupled step (Triton's ``repeat_int32``) flows through the
steps after it (an identity model that batches, so the batch dimension is added and stripped
too) and becomes one response of the ensemble, then the final flag."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from inferd.examples.streaming_models import build_streaming
from inferd.testing import ServerProcess, running_server
from tests.e2e.test_ensembles import write_ensemble
from tests.helpers.models import identity_model, write_model

pytestmark = pytest.mark.e2e

ENSEMBLE = """
name: "repeat_ensemble" platform: "ensemble" max_batch_size: 0
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
ensemble_scheduling { step [
  { model_name: "repeat_int32" model_version: -1
    input_map { key: "IN" value: "IN" } input_map { key: "DELAY" value: "DELAY" }
    input_map { key: "WAIT" value: "WAIT" }
    output_map { key: "OUT" value: "repeated" } output_map { key: "IDX" value: "IDX" } },
  { model_name: "identity_int32" model_version: -1
    input_map { key: "INPUT0" value: "repeated" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""

IDENTITY = (
    'name: "identity_int32" platform: "onnxruntime_onnx" max_batch_size: 8 '
    'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ] '
    'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]'
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("ensemble_decoupled")
    build_streaming("repeat_int32", repo / "repeat_int32")
    pairs = [("INPUT0", "OUTPUT0", TensorProto.INT32)]
    write_model(repo, "identity_int32", identity_model(pairs, [None, 1]), IDENTITY)
    write_ensemble(repo, "repeat_ensemble", ENSEMBLE)
    with running_server([repo]) as proc:
        yield proc


def _inputs(values: list[int]) -> list[Any]:
    arrays = [
        ("IN", np.array(values, dtype=np.int32), "INT32"),
        ("DELAY", np.zeros(len(values), dtype=np.uint32), "UINT32"),
        ("WAIT", np.zeros(1, dtype=np.uint32), "UINT32"),
    ]
    items = []
    for name, array, datatype in arrays:
        item = grpcclient.InferInput(name, list(array.shape), datatype)
        item.set_data_from_numpy(array)
        items.append(item)
    return items


def _final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def _values(result: Any) -> dict[str, list[int]]:
    return {
        name: array.tolist()
        for name in ("OUT", "IDX")
        if (array := result.as_numpy(name)) is not None
    }


def _stream(server: ServerProcess, values: list[int]) -> list[Any]:
    got: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        try:
            client.async_stream_infer(
                "repeat_ensemble", _inputs(values), enable_empty_final_response=True
            )
            results = []
            while True:
                result = got.get(timeout=60)
                assert not isinstance(result, InferenceServerException), result
                results.append(result)
                if _final(result):
                    return results
        finally:
            client.stop_stream()


def test_each_response_of_the_decoupled_step_is_one_response_of_the_ensemble(
    server: ServerProcess,
) -> None:
    results = _stream(server, [7, 8, 9])
    seen = [(_final(r), _values(r)) for r in results]  # what came, should a response be missing
    assert [_final(r) for r in results] == [False, False, False, True], seen
    answers = results[:3]
    assert [r.as_numpy("OUT").tolist() for r in answers] == [[7], [8], [9]]
    assert [r.as_numpy("IDX").tolist() for r in answers] == [[0], [1], [2]]
    # the identity step ran once per response, each with a batch dimension added
    http = httpclient.InferenceServerClient(server.http_url)
    stats = http.get_inference_statistics("identity_int32")["model_stats"][0]
    assert stats["inference_count"] == 3


def test_no_response_from_the_decoupled_step_means_the_final_flag_alone(
    server: ServerProcess,
) -> None:
    results = _stream(server, [])
    assert len(results) == 1
    assert _final(results[0])
    assert results[0].as_numpy("OUT") is None


def test_the_ensemble_is_decoupled(server: ServerProcess) -> None:
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    config = grpc.get_model_config("repeat_ensemble", as_json=True)["config"]
    assert config["model_transaction_policy"]["decoupled"] is True
    # a decoupled model answers on a stream only, as Triton refuses it over plain HTTP
    http = httpclient.InferenceServerClient(server.http_url)
    given = httpclient.InferInput("IN", [1], "INT32")
    given.set_data_from_numpy(np.array([1], dtype=np.int32))
    delay = httpclient.InferInput("DELAY", [1], "UINT32")
    delay.set_data_from_numpy(np.zeros(1, dtype=np.uint32))
    wait = httpclient.InferInput("WAIT", [1], "UINT32")
    wait.set_data_from_numpy(np.zeros(1, dtype=np.uint32))
    with pytest.raises(InferenceServerException, match="decoupled"):
        http.infer("repeat_ensemble", [given, delay, wait])
