"""The statistics extension's ``response_stats`` for a decoupled model, read with tritonclient
over HTTP and gRPC after requests of ``repeat_int32`` (one response per element of ``IN``, then
the final flag alone); and, read through them, the bound on what a stream that is not read
makes the server take from its model."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.examples.simple_models import build_simple
from inferd.examples.streaming_models import build_streaming
from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

PHASES = ("compute_infer", "compute_output", "success", "fail", "empty_response", "cancel")
Stats = dict[str, dict[str, tuple[int, int]]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("response_stats") / "models"
    build_streaming("repeat_int32", repo / "repeat_int32")
    build_simple("simple", repo / "simple")
    with running_server([repo]) as proc:
        yield proc


def _inputs(values: list[int], delay_us: int, delays: int | None = None) -> list[Any]:
    data = {
        "IN": np.array(values, dtype=np.int32),
        "DELAY": np.full(len(values) if delays is None else delays, delay_us, dtype=np.uint32),
        "WAIT": np.array([0], dtype=np.uint32),
    }
    inputs = []
    for name, array in data.items():
        item = grpcclient.InferInput(name, list(array.shape), "INT32" if name == "IN" else "UINT32")
        item.set_data_from_numpy(array)
        inputs.append(item)
    return inputs


def _run(server: ServerProcess, inputs: list[Any], responses: int) -> None:
    """One request on a stream, until its final (empty) response."""
    got: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        try:
            client.async_stream_infer("repeat_int32", inputs, enable_empty_final_response=True)
            for _ in range(responses + 1):
                item = got.get(timeout=30)
                if not hasattr(item, "get_response"):
                    break  # repeat_int32's error response is its final one
                if item.get_response().parameters["triton_final_response"].bool_param:
                    break
        finally:
            client.stop_stream()


def _http_stats(server: ServerProcess) -> Stats:
    with httpclient.InferenceServerClient(server.http_url) as client:
        stats = client.get_inference_statistics("repeat_int32")["model_stats"][0]
    return {
        key: {p: (entry[p]["count"], entry[p]["ns"]) for p in PHASES}
        for key, entry in stats["response_stats"].items()
    }


def _grpc_stats(server: ServerProcess) -> Stats:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        stats = client.get_inference_statistics("repeat_int32").model_stats[0]
    return {
        key: {p: (getattr(entry, p).count, getattr(entry, p).ns) for p in PHASES}
        for key, entry in stats.response_stats.items()
    }


def _both(server: ServerProcess) -> Stats:
    over_http = _http_stats(server)
    assert _grpc_stats(server) == over_http
    return over_http


def _counts(before: Stats, after: Stats) -> dict[str, dict[str, int]]:
    """What changed between two readings: counts by key and phase (non-zero only)."""
    changed: dict[str, dict[str, int]] = {}
    for key, phases in after.items():
        for phase, (count, _) in phases.items():
            delta = count - before.get(key, {}).get(phase, (0, 0))[0]
            if delta:
                changed.setdefault(key, {})[phase] = delta
    return changed


SUCCESS = {"compute_infer": 1, "compute_output": 1, "success": 1}
EMPTY = {"compute_infer": 1, "empty_response": 1}


def test_each_response_index_is_counted_over_http_and_grpc(server: ServerProcess) -> None:
    before = _both(server)
    delay_us = 30_000
    _run(server, _inputs([5, 6, 7], delay_us), 3)
    after = _both(server)
    assert _counts(before, after) == {"0": SUCCESS, "1": SUCCESS, "2": SUCCESS, "3": EMPTY}
    for key in ("0", "1", "2"):
        infer_ns = (
            after[key]["compute_infer"][1] - before.get(key, {}).get("compute_infer", (0, 0))[1]
        )
        assert infer_ns >= 0.9 * delay_us * 1000  # the model slept that long before sending
        phases = after[key]
        assert phases["success"][1] == phases["compute_infer"][1] + phases["compute_output"][1]
    # a second request adds up at the same keys
    _run(server, _inputs([1, 2], 0), 2)
    again = _counts(after, _both(server))
    assert again == {"0": SUCCESS, "1": SUCCESS, "2": EMPTY}


def test_an_error_response_counts_as_a_failure(server: ServerProcess) -> None:
    before = _both(server)
    _run(server, _inputs([1, 2], 0, delays=1), 1)  # DELAY has 1 element, IN 2: an error
    assert _counts(before, _both(server)) == {"0": {"compute_infer": 1, "fail": 1}}


def test_a_cancelled_request_counts_one_cancel(server: ServerProcess) -> None:
    before = _both(server)
    got: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        client.async_stream_infer("repeat_int32", _inputs(list(range(100)), 50_000))
        got.get(timeout=30)
        client.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + 30
    while True:  # the model ends the request when it notices the cancellation
        changed = _counts(before, _both(server))
        cancels = [key for key, phases in changed.items() if phases.get("cancel")]
        if cancels or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(cancels) == 1
    index = int(cancels[0])
    assert index >= 1  # after the response the client saw
    assert changed[cancels[0]] == {"cancel": 1}
    for key in range(index):
        assert changed[str(key)] == SUCCESS
    assert set(changed) == {str(k) for k in range(index + 1)}


def test_an_ordinary_model_has_no_response_stats(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            item = httpclient.InferInput(name, [1, 16], "INT32")
            item.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
            inputs.append(item)
        client.infer("simple", inputs)
        stats = client.get_inference_statistics("simple")["model_stats"][0]
    assert stats["response_stats"] == {}
    assert stats["inference_stats"]["success"]["count"] >= 1


def _stream_request(count: int) -> Any:
    request = service_pb2.ModelInferRequest(model_name="repeat_int32", id="big")
    arrays = (
        ("IN", np.arange(count, dtype=np.int32), "INT32"),
        ("DELAY", np.zeros(count, dtype=np.uint32), "UINT32"),
        ("WAIT", np.zeros(1, dtype=np.uint32), "UINT32"),
    )
    for name, array, datatype in arrays:
        request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        request.raw_input_contents.append(array.tobytes())
    return request


def test_a_stream_that_is_not_read_holds_the_model_back(server: ServerProcess) -> None:
    """The server takes a decoupled model's responses only as far as the stream's bound (1,024)
    and HTTP/2 flow control allow; ``response_stats`` shows how many it took (each response
    is counted as the server takes it)."""
    count = 6000
    hold = threading.Event()

    def requests() -> Iterator[Any]:
        yield _stream_request(count)
        hold.wait(60)  # the client keeps its side open, and reads nothing yet

    # without BDP probing the client's flow-control window stays at 64 KiB: it does not
    # absorb the responses itself
    channel = grpc.insecure_channel(server.grpc_url, options=[("grpc.http2.bdp_probe", 0)])
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        responses = stub.ModelStreamInfer(requests(), timeout=60)
        taken, steady = -1, 0
        deadline = time.monotonic() + 20
        while steady < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
            now = len(_http_stats(server))
            steady = steady + 1 if now == taken else 0
            taken = now
        # 1,024 held by the server, one in hand, and what 64 KiB of HTTP/2 window carries
        assert taken < 2500
        values = []
        for response in responses:
            assert not response.error_message
            out = response.infer_response.raw_output_contents[0]
            values.append(int(np.frombuffer(out, dtype=np.int32)[0]))
            if len(values) == count:
                break
        assert values == list(range(count))  # once read, everything arrives, in order
    finally:
        hold.set()
        channel.close()
