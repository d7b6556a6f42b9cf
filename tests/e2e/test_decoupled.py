"""Decoupled models over the gRPC stream, and models that call models, through tritonclient."""

from __future__ import annotations

import queue
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from inferd.examples.simple_models import build_simple
from inferd.examples.streaming_models import build_streaming
from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

TRITON_EXAMPLES = Path(__file__).parent / "triton_examples"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("streaming") / "models"
    for name in ("repeat_int32", "bls_router"):
        build_streaming(name, repo / name)
    build_simple("simple", repo / "simple")
    with running_server([repo]) as proc:
        yield proc


def _repeat_inputs(values: list[int], delay_us: int, wait_us: int = 0) -> list[Any]:
    data = {
        "IN": np.array(values, dtype=np.int32),
        "DELAY": np.full(len(values), delay_us, dtype=np.uint32),
        "WAIT": np.array([wait_us], dtype=np.uint32),
    }
    inputs = []
    for name, array in data.items():
        item = grpcclient.InferInput(name, list(array.shape), "INT32" if name == "IN" else "UINT32")
        item.set_data_from_numpy(array)
        inputs.append(item)
    return inputs


def _collect(client: Any, inputs: list[Any], *, empty_final: bool, until_final: bool) -> list[Any]:
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put(error or result))
    try:
        client.async_stream_infer("repeat_int32", inputs, enable_empty_final_response=empty_final)
        got = []
        while True:
            item = results.get(timeout=30)
            got.append(item)
            if isinstance(item, InferenceServerException):
                break
            final = item.get_response().parameters["triton_final_response"].bool_param
            if final or (not until_final and len(got) == 3):
                break
        return got
    finally:
        client.stop_stream()


def test_many_responses_then_empty_final(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        got = _collect(client, _repeat_inputs([7, 8, 9], 1000), empty_final=True, until_final=True)
    assert [r.as_numpy("OUT").tolist() for r in got[:3]] == [[7], [8], [9]]
    assert [r.as_numpy("IDX").tolist() for r in got[:3]] == [[0], [1], [2]]
    flags = [r.get_response().parameters["triton_final_response"].bool_param for r in got]
    assert flags == [False, False, False, True]
    last = got[-1].get_response()
    assert last.model_name == "repeat_int32"
    assert not last.outputs


def test_zero_responses(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        got = _collect(client, _repeat_inputs([], 0), empty_final=True, until_final=True)
    assert len(got) == 1
    assert got[0].get_response().parameters["triton_final_response"].bool_param
    assert not got[0].get_response().outputs


def test_error_in_the_stream(server: ServerProcess) -> None:
    inputs = _repeat_inputs([1, 2], 0)
    inputs[1] = grpcclient.InferInput("DELAY", [1], "UINT32")
    inputs[1].set_data_from_numpy(np.array([5], dtype=np.uint32))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        got = _collect(client, inputs, empty_final=False, until_final=True)
    assert isinstance(got[-1], InferenceServerException)
    assert "DELAY has 1 elements but IN has 2" in got[-1].message()


def _simple_inputs() -> list[Any]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        item = grpcclient.InferInput(name, [1, 16], "INT32")
        item.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        inputs.append(item)
    return inputs


def _stream_answers(client: Any, send: list[tuple[str, list[Any], str]], count: int) -> list[Any]:
    """Send (model, inputs, id) requests on one stream; the first ``count`` results."""
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put(error or result))
    try:
        for model, inputs, request_id in send:
            client.async_stream_infer(model, inputs, request_id=request_id)
        return [results.get(timeout=30) for _ in range(count)]
    finally:
        client.stop_stream()


def test_a_fast_request_is_answered_before_an_earlier_slow_one(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        got = _stream_answers(
            client,
            [
                ("repeat_int32", _repeat_inputs([10, 11], 400_000), "slow"),
                ("repeat_int32", _repeat_inputs([20, 21], 0), "fast"),
            ],
            4,
        )
    assert not any(isinstance(g, InferenceServerException) for g in got)
    ids = [g.get_response().id for g in got]
    assert ids == ["fast", "fast", "slow", "slow"]
    assert [int(g.as_numpy("OUT")[0]) for g in got] == [20, 21, 10, 11]


def test_an_ordinary_request_does_not_wait_for_an_earlier_decoupled_one(
    server: ServerProcess,
) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        got = _stream_answers(
            client,
            [
                ("repeat_int32", _repeat_inputs([1], 400_000), "decoupled"),
                ("simple", _simple_inputs(), "ordinary-1"),
                ("nope", _simple_inputs(), "ordinary-2"),
                ("simple", _simple_inputs(), "ordinary-3"),
            ],
            4,
        )
    ordinary = got[:3]
    assert ordinary[0].get_response().id == "ordinary-1"
    assert ordinary[0].as_numpy("OUTPUT0").tolist() == [list(range(0, 32, 2))]
    assert isinstance(ordinary[1], InferenceServerException)  # in band, in request order
    assert "unknown model" in ordinary[1].message()
    assert ordinary[2].get_response().id == "ordinary-3"
    assert got[3].get_response().id == "decoupled"


def test_unary_infer_of_a_decoupled_model_is_refused(server: ServerProcess) -> None:
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as client,
        pytest.raises(InferenceServerException, match="decoupled") as caught,
    ):
        client.infer("repeat_int32", _repeat_inputs([1], 0))
    assert caught.value.status() == "StatusCode.UNIMPLEMENTED"


def test_cancelling_the_stream_stops_the_model(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        results: queue.Queue[Any] = queue.Queue()
        client.start_stream(callback=lambda result, error: results.put(error or result))
        client.async_stream_infer("repeat_int32", _repeat_inputs(list(range(1000)), 20_000))
        first = results.get(timeout=30)
        assert first.as_numpy("OUT").tolist() == [0]
        client.stop_stream(cancel_requests=True)
        # the model saw the cancellation and stopped: the next request runs at once
        got = _collect(client, _repeat_inputs([5], 0), empty_final=True, until_final=True)
    assert got[0].as_numpy("OUT").tolist() == [5]


def _router_inputs(model: str) -> list[Any]:
    inputs = [
        grpcclient.InferInput("MODEL", [1], "BYTES"),
        grpcclient.InferInput("INPUT0", [16], "INT32"),
        grpcclient.InferInput("INPUT1", [16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(np.array([model.encode()], dtype=object))
    inputs[1].set_data_from_numpy(np.arange(16, dtype=np.int32))
    inputs[2].set_data_from_numpy(np.full(16, 2, dtype=np.int32))
    return inputs


def test_bls_calls_another_model(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("bls_router", _router_inputs("simple"))
    assert result.as_numpy("OUTPUT0").tolist() == list(range(2, 18))
    assert result.as_numpy("OUTPUT1").tolist() == list(range(-2, 14))


def test_bls_call_to_an_unknown_model(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException, match="unknown model: 'nope'"):
            client.infer("bls_router", _router_inputs("nope"))
        # the server and the router keep working
        assert client.infer("bls_router", _router_inputs("simple")).as_numpy("OUTPUT0")[0] == 2


def test_triton_simple_grpc_custom_repeat_runs_unmodified(server: ServerProcess) -> None:
    script = TRITON_EXAMPLES / "simple_grpc_custom_repeat.py"  # see that folder's README
    run = subprocess.run(
        [sys.executable, str(script), "-u", server.grpc_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "PASS: Decoupled API" in run.stdout
