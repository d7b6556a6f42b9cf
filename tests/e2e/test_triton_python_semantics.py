"""Triton's Python backend semantics through tritonclient: Triton's decoupled examples (``square``,
``repeat``: their ``initialize`` asks ``pb_utils.using_decoupled_model_transaction_policy``),
and zero-element outputs from decoupled and ordinary Python models."""

from __future__ import annotations

import queue
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

# Triton's python_backend examples/decoupled/square_model.py, as Triton writes it
SQUARE_MODEL = '''
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])

        using_decoupled = pb_utils.using_decoupled_model_transaction_policy(model_config)
        if not using_decoupled:
            raise pb_utils.TritonModelException(
                """the model `{}` can generate any number of responses per request,
                enable decoupled transaction policy in model configuration to
                serve this model""".format(args["model_name"])
            )

        out_config = pb_utils.get_output_config_by_name(model_config, "OUT")
        self.out_dtype = pb_utils.triton_string_to_numpy(out_config["data_type"])
        self.inflight_thread_count = 0
        self.inflight_thread_count_lck = threading.Lock()

    def execute(self, requests):
        for request in requests:
            self.process_request(request)
        return None

    def process_request(self, request):
        thread = threading.Thread(
            target=self.response_thread,
            args=(
                request.get_response_sender(),
                pb_utils.get_input_tensor_by_name(request, "IN").as_numpy(),
            ),
        )
        thread.daemon = True
        with self.inflight_thread_count_lck:
            self.inflight_thread_count += 1
        thread.start()

    def response_thread(self, response_sender, in_input):
        for idx in range(in_input[0]):
            out_output = pb_utils.Tensor("OUT", np.array([in_input[0]], np.int32))
            response = pb_utils.InferenceResponse(output_tensors=[out_output])
            response_sender.send(response)
        response_sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        with self.inflight_thread_count_lck:
            self.inflight_thread_count -= 1

    def finalize(self):
        pb_utils.Logger.log_info("Finalize invoked")
        inflight_threads = True
        while inflight_threads:
            with self.inflight_thread_count_lck:
                inflight_threads = self.inflight_thread_count != 0
            if inflight_threads:
                time.sleep(0.1)
'''

SQUARE_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
{policy}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU }} ]
"""

# Triton's examples/decoupled/repeat_model.py: initialize refuses a coupled config, execute
# sends one response per element of IN from a thread, then the final flag
REPEAT_MODEL = '''
import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        using_decoupled = pb_utils.using_decoupled_model_transaction_policy(model_config)
        if not using_decoupled:
            raise pb_utils.TritonModelException(
                """the model `{}` can generate any number of responses per request,
                enable decoupled transaction policy in model configuration to
                serve this model""".format(args["model_name"])
            )
        out_config = pb_utils.get_output_config_by_name(model_config, "OUT")
        self.out_dtype = pb_utils.triton_string_to_numpy(out_config["data_type"])
        idx_config = pb_utils.get_output_config_by_name(model_config, "IDX")
        self.idx_dtype = pb_utils.triton_string_to_numpy(idx_config["data_type"])

    def execute(self, requests):
        for request in requests:
            thread = threading.Thread(target=self.repeat, args=(request,), daemon=True)
            thread.start()
        return None

    def repeat(self, request):
        sender = request.get_response_sender()
        values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        for idx in range(values.size):
            out = pb_utils.Tensor("OUT", np.array([values[idx]], dtype=self.out_dtype))
            index = pb_utils.Tensor("IDX", np.array([idx], dtype=self.idx_dtype))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out, index]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

REPEAT_CONFIG = """
name: "repeat_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: True }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
"""

# OUT keeps IN's shape with its first dimension cut to N, TEXT has N strings (N = 0: every output
# has zero elements); the decoupled twin sends OUT alone (its first response: nothing to place
# in shared memory), then OUT and TEXT, then the final flag
EMPTY_MODEL = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            outs = [
                pb_utils.Tensor("OUT", np.ascontiguousarray(x[:n])),
                pb_utils.Tensor("TEXT", np.array([b"t"] * n, dtype=np.object_)),
            ]
            response = pb_utils.InferenceResponse(output_tensors=outs)
            if not self.decoupled:
                responses.append(response)
                continue
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(output_tensors=outs[:1]))
            sender.send(response)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None if self.decoupled else responses
"""

EMPTY_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
{policy}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1, 3 ] }},
        {{ name: "N" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1, 3 ] }},
         {{ name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] }} ]
"""

DECOUPLED = "model_transaction_policy { decoupled: True }"


def _model(repo: Path, name: str, config: str, source: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(config))
    (repo / name / "1" / "model.py").write_text(source)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("triton_python") / "models"
    _model(
        repo,
        "square_int32",
        SQUARE_CONFIG.format(name="square_int32", policy=DECOUPLED),
        SQUARE_MODEL,
    )
    _model(
        repo, "square_coupled", SQUARE_CONFIG.format(name="square_coupled", policy=""), SQUARE_MODEL
    )
    _model(repo, "repeat_int32", REPEAT_CONFIG, REPEAT_MODEL)
    _model(repo, "empty", EMPTY_CONFIG.format(name="empty", policy=""), EMPTY_MODEL)
    _model(
        repo,
        "empty_decoupled",
        EMPTY_CONFIG.format(name="empty_decoupled", policy=DECOUPLED),
        EMPTY_MODEL,
    )
    args = ["--model-control-mode", "explicit"]
    for name in ("square_int32", "repeat_int32", "empty", "empty_decoupled"):
        args += ["--load-model", name]
    with running_server([repo], args) as proc:
        yield proc


def _stream(server: ServerProcess, model: str, inputs: list[Any]) -> list[Any]:
    """Every response of one streamed request, up to the final flag (empty final asked for)."""
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put(error or result))
        try:
            client.async_stream_infer(model, inputs, enable_empty_final_response=True)
            got = []
            while True:
                item = results.get(timeout=30)
                if isinstance(item, InferenceServerException):
                    raise item
                response = item.get_response()
                if response.parameters["triton_final_response"].bool_param:
                    assert not response.outputs
                    return got
                got.append(item)
        finally:
            client.stop_stream()


def _int32(name: str, values: list[int]) -> Any:
    item = grpcclient.InferInput(name, [len(values)], "INT32")
    item.set_data_from_numpy(np.array(values, dtype=np.int32))
    return item


def test_triton_square_example_sends_n_responses(server: ServerProcess) -> None:
    """Triton's square_client.py: IN = n gets n responses of [n]; 0 gets none, only the final."""
    for n in (4, 2, 0, 1):
        got = _stream(server, "square_int32", [_int32("IN", [n])])
        assert [r.as_numpy("OUT").tolist() for r in got] == [[n]] * n


def test_triton_repeat_example_repeats_each_element(server: ServerProcess) -> None:
    got = _stream(server, "repeat_int32", [_int32("IN", [4, 2, 0, 1])])
    assert [r.as_numpy("OUT").tolist() for r in got] == [[4], [2], [0], [1]]
    assert [r.as_numpy("IDX").tolist() for r in got] == [[0], [1], [2], [3]]
    assert _stream(server, "repeat_int32", [_int32("IN", [])]) == []


def test_decoupled_example_refuses_a_coupled_configuration(server: ServerProcess) -> None:
    """``using_decoupled_model_transaction_policy`` is False without the policy: the model's
    own ``initialize`` refuses to load, with its message."""
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert client.is_model_ready("square_int32")
        assert not client.is_model_ready("square_coupled")
        with pytest.raises(InferenceServerException, match="enable decoupled transaction policy"):
            client.load_model("square_coupled")


def _empty_inputs(module: Any, rows: int, n: int) -> list[Any]:
    x = module.InferInput("IN", [rows, 3], "FP32")
    x.set_data_from_numpy(np.arange(rows * 3, dtype=np.float32).reshape(rows, 3))
    count = module.InferInput("N", [1], "INT32")
    count.set_data_from_numpy(np.array([n], dtype=np.int32))
    return [x, count]


@pytest.mark.parametrize("rows", [0, 2])
def test_zero_element_outputs_of_a_python_model(server: ServerProcess, rows: int) -> None:
    with httpclient.InferenceServerClient(server.http_url) as http:
        result = http.infer("empty", _empty_inputs(httpclient, rows, 0))
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        answer = grpc.infer("empty", _empty_inputs(grpcclient, rows, 0))
    for got in (result, answer):
        assert got.as_numpy("OUT").shape == (0, 3)
        assert got.as_numpy("OUT").dtype == np.float32
        assert got.as_numpy("TEXT").shape == (0,)


@pytest.mark.parametrize("rows", [0, 2])
def test_zero_element_outputs_of_a_decoupled_python_model(server: ServerProcess, rows: int) -> None:
    got = _stream(server, "empty_decoupled", _empty_inputs(grpcclient, rows, 0))
    assert len(got) == 2
    for response in got:
        assert response.as_numpy("OUT").shape == (0, 3)
        assert response.as_numpy("OUT").dtype == np.float32
    assert got[1].as_numpy("TEXT").shape == (0,)
    # the same instance goes on to answer ordinary responses
    full = _stream(server, "empty_decoupled", _empty_inputs(grpcclient, 2, 2))
    assert full[1].as_numpy("OUT").tolist() == [[0, 1, 2], [3, 4, 5]]
    assert full[1].as_numpy("TEXT").tolist() == [b"t", b"t"]
