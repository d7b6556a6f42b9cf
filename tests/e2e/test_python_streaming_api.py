"""The typed API's ``Model.stream()`` and business-logic ``exec(decoupled=True)`` and
``async_exec()``, end to end through tritonclient; shared memory of many streams is released."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from inferd.examples.simple_models import build_simple
from inferd.examples.streaming_models import build_streaming
from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

COUNTDOWN_CONFIG = """
name: "countdown"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "LEFT", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""

COUNTDOWN_MODEL = """
import numpy as np
from inferd.backends.python.api import Model


class Countdown(Model):
    def stream(self, inputs, request):
        for left in range(int(inputs["N"][0]) - 1, -1, -1):
            yield {"LEFT": np.array([left], dtype=np.int32)}
"""

CALLER_CONFIG = """
name: "caller"
backend: "python"
max_batch_size: 0
input [ { name: "N", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [
  { name: "PARTS", data_type: TYPE_INT32, dims: [ -1 ] },
  { name: "SUM", data_type: TYPE_INT32, dims: [ 16 ] }
]
"""

# exec(decoupled=True) on the typed countdown, and two async_exec() calls to "simple" at once
CALLER_MODEL = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "N").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name="countdown", requested_output_names=["LEFT"],
                inputs=[pb_utils.Tensor("N", n)],
            )
            parts = []
            for response in call.exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                left = pb_utils.get_output_tensor_by_name(response, "LEFT")
                parts.append(int(left.as_numpy()[0]))
            a = np.arange(16, dtype=np.int32).reshape(1, 16)
            calls = [
                pb_utils.InferenceRequest(
                    model_name="simple", requested_output_names=["OUTPUT0"],
                    inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", a * k)],
                ).async_exec()
                for k in (1, 2)
            ]
            first, second = await asyncio.gather(*calls)
            for answer in (first, second):
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            total = (pb_utils.get_output_tensor_by_name(first, "OUTPUT0").as_numpy()
                     + pb_utils.get_output_tensor_by_name(second, "OUTPUT0").as_numpy())
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("PARTS", np.array(parts, dtype=np.int32)),
                pb_utils.Tensor("SUM", total[0].astype(np.int32)),
            ]))
        return responses
"""


def _write(repo: Path, name: str, config: str, model: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(model)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("streaming_api") / "models"
    _write(repo, "countdown", COUNTDOWN_CONFIG, COUNTDOWN_MODEL)
    _write(repo, "caller", CALLER_CONFIG, CALLER_MODEL)
    build_simple("simple", repo / "simple")
    build_streaming("repeat_int32", repo / "repeat_int32")
    with running_server([repo]) as proc:
        yield proc


def _n(value: int) -> list[Any]:
    item = grpcclient.InferInput("N", [1], "INT32")
    item.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [item]


def test_typed_stream_sends_each_yield(server: ServerProcess) -> None:
    got: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        try:
            client.async_stream_infer("countdown", _n(4), enable_empty_final_response=True)
            results = [got.get(timeout=30) for _ in range(5)]
        finally:
            client.stop_stream()
    assert [r.as_numpy("LEFT").tolist() for r in results[:4]] == [[3], [2], [1], [0]]
    assert results[4].get_response().parameters["triton_final_response"].bool_param


def test_bls_exec_decoupled_and_async_exec(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("caller", _n(3))
    assert result.as_numpy("PARTS").tolist() == [2, 1, 0]
    assert result.as_numpy("SUM").tolist() == [5 * i for i in range(16)]


def _arena_files() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("inferd-py-*")}


def test_many_finished_and_cancelled_streams_leave_no_shared_memory(
    server: ServerProcess,
) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.infer("caller", _n(2))  # every worker has started and mapped its arenas
        before = _arena_files()
        for round_ in range(20):
            got: queue.Queue[Any] = queue.Queue()
            client.start_stream(callback=lambda result, error, got=got: got.put(error or result))
            values = np.arange(200, dtype=np.int32)
            items = [
                grpcclient.InferInput("IN", [200], "INT32"),
                grpcclient.InferInput("DELAY", [200], "UINT32"),
                grpcclient.InferInput("WAIT", [1], "UINT32"),
            ]
            items[0].set_data_from_numpy(values)
            items[1].set_data_from_numpy(np.full(200, 1000 * (round_ % 2), dtype=np.uint32))
            items[2].set_data_from_numpy(np.zeros(1, dtype=np.uint32))
            client.async_stream_infer("repeat_int32", items)
            assert got.get(timeout=30).as_numpy("OUT").tolist() == [0]
            client.stop_stream(cancel_requests=round_ % 2 == 1)  # odd rounds: cancelled
        client.infer("caller", _n(2))  # still serving
    assert _arena_files() <= before
