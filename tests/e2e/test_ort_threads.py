"""ONNX Runtime thread parameters against a real ``inferd serve``: a load whose thread or
spinning parameter is malformed or misspelt is refused (HTTP 400, gRPC INVALID_ARGUMENT) with the
parameter named, and a good one loads, serves and logs the thread layout it got."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

CONFIG: dict[str, Any] = {
    "name": "add",
    "platform": "onnxruntime_onnx",
    "max_batch_size": 8,
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [4]}],
    "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
}


def _write_model(path: Path) -> None:
    one = helper.make_tensor("one", TensorProto.FLOAT, [4], [1.0] * 4)
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "one"], ["Y"])],
        "add",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
        [one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True)
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("ort-threads")
    _write_model(repo / "add" / "1" / "model.onnx")
    (repo / "add" / "config.pbtxt").write_text('name: "add"\nplatform: "onnxruntime_onnx"\n')
    with running_server([repo], ["--model-control-mode", "explicit"]) as proc:
        yield proc


def _config(**params: str) -> str:
    config = dict(CONFIG)
    config["parameters"] = {key: {"string_value": value} for key, value in params.items()}
    return json.dumps(config)


def _refused(call: Callable[[], object], status: str) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == status, info.value
    return str(info.value.message())


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"allow_spinning": "sometimes"}, "parameter 'allow_spinning' must be a boolean"),
        ({"intra_op_thread_count": "-1"}, "parameter 'intra_op_thread_count' must be"),
        ({"intra_op_threads": "2"}, "did you mean 'intra_op_thread_count'?"),
    ],
)
def test_a_bad_thread_parameter_is_refused_by_name(
    server: ServerProcess, params: dict[str, str], message: str
) -> None:
    config = _config(**params)
    with (
        httpclient.InferenceServerClient(server.http_url, network_timeout=60.0) as http,
        grpcclient.InferenceServerClient(server.grpc_url) as grpc,
    ):
        if http.is_model_ready("add"):  # left loaded by a test that failed
            http.unload_model("add")
        assert message in _refused(lambda: http.load_model("add", config=config), "400")
        got = _refused(lambda: grpc.load_model("add", config=config), "StatusCode.INVALID_ARGUMENT")
        assert message in got
        assert not http.is_model_ready("add")


def test_thread_parameters_load_serve_and_are_logged(server: ServerProcess) -> None:
    config = _config(intra_op_thread_count="3", allow_spinning="1")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with httpclient.InferenceServerClient(server.http_url, network_timeout=60.0) as http:
        http.load_model("add", config=config)
        try:
            given = httpclient.InferInput("X", [2, 4], "FP32")
            given.set_data_from_numpy(x)
            result = http.infer("add", [given]).as_numpy("Y")
            np.testing.assert_array_equal(result, x + 1)
        finally:
            http.unload_model("add")
    wanted = (
        "model 'add' version 1: onnxruntime 1 session(s) x 3 intra-op thread(s) "
        "(intra_op_thread_count), inter-op threads unused (sequential), spinning on"
    )
    deadline = time.monotonic() + 10.0  # the log is written by another process
    while wanted not in server.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert wanted in server.log_path.read_text()
