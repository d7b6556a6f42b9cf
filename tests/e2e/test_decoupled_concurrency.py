"""A decoupled Python model's instance is free as soon as ``execute`` returns: requests overlap,
on one gRPC stream and across streams, and no response is lost or reordered within its
request."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from inferd.examples.streaming_models import build_streaming
from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

IN_FLIGHT_CONFIG = """
name: "in_flight"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
instance_group [ { kind: KIND_CPU, count: 1 } ]
input [ { name: "WANT", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "SEEN", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""

# Each request waits (from a thread of the model's own) until WANT requests have been in flight
# at once, or 20 s, and answers the most it saw together: with one instance, only an instance
# that is free again once ``execute`` returns lets two requests meet. The peak, not the live
# count, is what a woken request reads: the other may have answered and left before it wakes.
IN_FLIGHT_MODEL = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.cond = threading.Condition()
        self.active = 0
        self.peak = 0

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.run, args=(request,), daemon=True).start()
        return None

    def run(self, request):
        want = int(pb_utils.get_input_tensor_by_name(request, "WANT").as_numpy()[0])
        with self.cond:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.peak >= want, timeout=20)
            seen = self.peak
        out = pb_utils.Tensor("SEEN", np.array([seen], dtype=np.int32))
        sender = request.get_response_sender()
        sender.send(pb_utils.InferenceResponse([out]))
        with self.cond:
            self.active -= 1
            if self.active == 0:
                self.peak = 0
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("decoupled_concurrency") / "models"
    build_streaming("repeat_int32", repo / "repeat_int32")
    (repo / "in_flight" / "1").mkdir(parents=True)
    (repo / "in_flight" / "config.pbtxt").write_text(IN_FLIGHT_CONFIG)
    (repo / "in_flight" / "1" / "model.py").write_text(IN_FLIGHT_MODEL)
    with running_server([repo]) as proc:
        yield proc


def _input(name: str, array: np.ndarray[Any, Any], datatype: str) -> Any:
    item = grpcclient.InferInput(name, list(array.shape), datatype)
    item.set_data_from_numpy(array)
    return item


def _want(count: int) -> list[Any]:
    return [_input("WANT", np.array([count], dtype=np.int32), "INT32")]


def _repeat(values: list[int], delay_us: int, wait_us: int = 0) -> list[Any]:
    return [
        _input("IN", np.array(values, dtype=np.int32), "INT32"),
        _input("DELAY", np.full(len(values), delay_us, dtype=np.uint32), "UINT32"),
        _input("WAIT", np.array([wait_us], dtype=np.uint32), "UINT32"),
    ]


def _final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def test_requests_on_one_stream_overlap(server: ServerProcess) -> None:
    got: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        try:
            client.async_stream_infer("in_flight", _want(2), request_id="a")
            client.async_stream_infer("in_flight", _want(2), request_id="b")
            results = [got.get(timeout=60) for _ in range(2)]
        finally:
            client.stop_stream()
    # decoupled responses are written as they are sent, in no particular order: by id
    assert sorted(r.get_response().id for r in results) == ["a", "b"]
    assert [r.as_numpy("SEEN").tolist() for r in results] == [[2], [2]]


def test_a_long_request_does_not_hold_the_instance(server: ServerProcess) -> None:
    slow: queue.Queue[Any] = queue.Queue()
    fast: queue.Queue[Any] = queue.Queue()
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as one,
        grpcclient.InferenceServerClient(server.grpc_url) as two,
    ):
        one.start_stream(callback=lambda result, error: slow.put(error or result))
        two.start_stream(callback=lambda result, error: fast.put(error or result))
        try:
            # answers at once, then keeps its request open for 30 s
            one.async_stream_infer("repeat_int32", _repeat([1], 0, 30_000_000))
            assert slow.get(timeout=30).as_numpy("OUT").tolist() == [1]
            two.async_stream_infer(
                "repeat_int32", _repeat([2, 3], 0), enable_empty_final_response=True
            )
            answers = [fast.get(timeout=20) for _ in range(3)]
            assert [_final(a) for a in answers] == [False, False, True]
            assert slow.empty()  # the first request is still open
        finally:
            one.stop_stream(cancel_requests=True)
            two.stop_stream()


def test_many_interleaved_requests_lose_nothing(server: ServerProcess) -> None:
    got: queue.Queue[Any] = queue.Queue()
    count, each = 12, 6
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        try:
            for r in range(count):
                values = [r * 100 + i for i in range(each)]
                client.async_stream_infer(
                    "repeat_int32",
                    _repeat(values, 2000 * (r % 3)),
                    request_id=str(r),
                    enable_empty_final_response=True,
                )
            results = [got.get(timeout=60) for _ in range(count * (each + 1))]
        finally:
            client.stop_stream()
    per_request: dict[str, list[int]] = {}
    finals: list[str] = []
    for result in results:
        rid = result.get_response().id
        if _final(result):
            finals.append(rid)
        else:
            per_request.setdefault(rid, []).append(int(result.as_numpy("OUT")[0]))
    assert sorted(finals, key=int) == [str(r) for r in range(count)]
    for r in range(count):
        assert per_request[str(r)] == [r * 100 + i for i in range(each)]


def test_cancelling_one_stream_leaves_the_others_running(server: ServerProcess) -> None:
    kept: queue.Queue[Any] = queue.Queue()
    dropped: queue.Queue[Any] = queue.Queue()
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as one,
        grpcclient.InferenceServerClient(server.grpc_url) as two,
    ):
        one.start_stream(callback=lambda result, error: dropped.put(error or result))
        two.start_stream(callback=lambda result, error: kept.put(error or result))
        try:
            one.async_stream_infer("repeat_int32", _repeat(list(range(1000)), 20_000))
            two.async_stream_infer(
                "repeat_int32", _repeat(list(range(5)), 50_000), enable_empty_final_response=True
            )
            assert dropped.get(timeout=30).as_numpy("OUT").tolist() == [0]
            one.stop_stream(cancel_requests=True)
            answers = [kept.get(timeout=30) for _ in range(6)]
        finally:
            two.stop_stream()
    assert [int(a.as_numpy("OUT")[0]) for a in answers[:5]] == [0, 1, 2, 3, 4]
    assert _final(answers[5])
