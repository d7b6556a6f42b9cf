"""The gRPC front end on 127.0.0.1:0, driven by tritonclient (sync, streaming and asyncio).

The server runs over the real stack (repository manager, ONNX Runtime backend, engine) serving
the models of ``tests/integration/conftest.py``; ``spin`` keeps a request busy inside
onnxruntime for about a millisecond per unit of its input.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import queue
import types
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

import inferd
from inferd.errors import ErrorCode
from inferd.frontends.access import AccessPolicy, parse_restriction
from inferd.frontends.grpc import STATUS_BY_CODE, start_grpc_server
from inferd.frontends.grpc.handlers import API_BY_METHOD
from inferd.scheduling.direct import DirectScheduler
from tests.helpers.models import add_sub_model
from tests.integration.conftest import LoopThread, Stack, start_stack


@dataclass(slots=True)
class Serving:
    url: str
    stack: Stack
    thread: LoopThread

    def spin_scheduler(self) -> DirectScheduler:
        scheduler = self.stack.manager.get("spin", None).scheduler
        assert isinstance(scheduler, DirectScheduler)
        return scheduler


@pytest.fixture(scope="module")
def serving(serving_roots: list[Path], loop_thread: LoopThread) -> Iterator[Serving]:
    """A real grpc.aio server on its own event loop thread (the sync client blocks)."""
    stack = loop_thread.call(start_stack(serving_roots, server_version="0.0.0-test"))
    log = logging.getLogger("inferd.test.grpc")
    server, port = loop_thread.call(start_grpc_server(stack.engine, "127.0.0.1", 0, log=log))
    assert server.port == port > 0
    try:
        yield Serving(f"127.0.0.1:{port}", stack, loop_thread)
    finally:
        loop_thread.call(server.stop(1.0))
        loop_thread.call(stack.manager.close())


@pytest.fixture
def client(serving: Serving) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(serving.url) as c:
        yield c


def simple_inputs(
    a: np.ndarray[Any, Any] | None = None, b: np.ndarray[Any, Any] | None = None
) -> list[grpcclient.InferInput]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16) if a is None else a
    b = np.ones((1, 16), dtype=np.int32) if b is None else b
    inputs = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        infer_input = grpcclient.InferInput(name, list(array.shape), "INT32")
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    return inputs


def one_input(name: str, value: int) -> list[grpcclient.InferInput]:
    infer_input = grpcclient.InferInput(name, [1], "INT32")
    infer_input.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [infer_input]


def text_input(name: str, text: str) -> list[grpcclient.InferInput]:
    infer_input = grpcclient.InferInput(name, [1], "BYTES")
    infer_input.set_data_from_numpy(np.array([text.encode()], dtype=object))
    return [infer_input]


class PeakInFlight:
    """Samples a scheduler's ``in_flight`` on the server's loop until cancelled."""

    def __init__(self, scheduler: DirectScheduler) -> None:
        self.scheduler = scheduler
        self.peak = 0

    async def run(self) -> None:
        while True:
            self.peak = max(self.peak, self.scheduler.in_flight)
            await asyncio.sleep(0.001)


def expect_error(status: str, call: Callable[[], Any]) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == status, info.value.message()
    return str(info.value.message())


# -- tests --------------------------------------------------------------------------------------


def test_error_table_covers_every_code() -> None:
    assert set(STATUS_BY_CODE) == set(ErrorCode)
    assert STATUS_BY_CODE[ErrorCode.UNSUPPORTED] is grpc.StatusCode.UNIMPLEMENTED


def test_health(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "2")
    assert not client.is_model_ready("no_such_model")
    assert not client.is_model_ready("simple", "x")


def test_server_and_model_metadata(client: grpcclient.InferenceServerClient) -> None:
    server = client.get_server_metadata()
    assert server.name == "triton"
    assert server.version == "0.0.0-test"
    assert "model_repository" in server.extensions
    meta = client.get_model_metadata("simple")
    assert (meta.name, list(meta.versions), meta.platform) == ("simple", ["1"], "onnxruntime_onnx")
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    assert [t.name for t in meta.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert client.get_model_metadata("spin", as_json=True)["platform"] == "onnxruntime_onnx"


def test_model_config(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("simple").config
    assert config.name == "simple"
    assert config.max_batch_size == 8
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    as_json = client.get_model_config("simple", "1", as_json=True)
    assert as_json["config"]["input"][0]["data_type"] == "TYPE_INT32"


def test_infer_int32(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    result = client.infer("simple", simple_inputs(a, b), request_id="r-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert (response.id, response.model_name, response.model_version) == ("r-1", "simple", "1")


def test_infer_requested_output_subset_and_classification(
    client: grpcclient.InferenceServerClient,
) -> None:
    outputs = [grpcclient.InferRequestedOutput("OUTPUT1")]
    result = client.infer("simple", simple_inputs(), outputs=outputs)
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    result = client.infer("simple", simple_inputs(), outputs=outputs)
    assert result.as_numpy("OUTPUT0").tolist() == [[b"16:15", b"15:14"]]


def test_infer_bytes(client: grpcclient.InferenceServerClient) -> None:
    a = np.array([[str(i).encode() for i in range(16)]], dtype=object)
    b = np.array([[b"1"] * 16], dtype=object)
    inputs = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        infer_input = grpcclient.InferInput(name, [1, 16], "BYTES")
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    result = client.infer("simple_string", inputs)
    assert result.as_numpy("OUTPUT0").tolist() == [[str(i + 1).encode() for i in range(16)]]
    assert result.as_numpy("OUTPUT1")[0, 0] == b"-1"


def test_infer_errors(client: grpcclient.InferenceServerClient) -> None:
    text = expect_error("StatusCode.NOT_FOUND", lambda: client.infer("nope", simple_inputs()))
    assert text.startswith("Request for unknown model")
    text = expect_error(
        "StatusCode.INVALID_ARGUMENT",
        lambda: client.infer("simple", simple_inputs(), model_version="x"),
    )
    assert text.startswith("failed to get model version from specified version string 'x'")
    bad = simple_inputs(np.zeros((1, 3), np.int32), np.zeros((1, 3), np.int32))
    text = expect_error("StatusCode.INVALID_ARGUMENT", lambda: client.infer("simple", bad))
    assert "unexpected shape for input 'INPUT0'" in text
    # onnxruntime fails at run time on the request's content (Cast of non-numeric text): the
    # client's error, with the runtime's reason and no request data echoed back
    text = expect_error(
        "StatusCode.INVALID_ARGUMENT", lambda: client.infer("failing", text_input("X", "secret"))
    )
    assert text.startswith("inference request to model 'failing' failed in onnxruntime")
    assert "secret" not in text
    text = expect_error(
        "StatusCode.NOT_FOUND", lambda: client.get_model_metadata("nope", as_json=True)
    )
    assert text.startswith("Request for unknown model")
    expect_error("StatusCode.NOT_FOUND", lambda: client.get_model_config("simple", "7"))


def test_stream_keeps_order_and_survives_a_failing_request(
    client: grpcclient.InferenceServerClient,
) -> None:
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: received.put((result, error)))
    bad = simple_inputs(np.zeros((1, 3), np.int32), np.zeros((1, 3), np.int32))
    client.async_stream_infer("simple", simple_inputs(), request_id="1")
    client.async_stream_infer("simple", bad, request_id="2")
    client.async_stream_infer("nope", simple_inputs(), request_id="3")
    client.async_stream_infer("simple", simple_inputs(), request_id="4")
    client.stop_stream()
    got = [received.get(timeout=30) for _ in range(4)]
    assert got[0][1] is None
    assert got[0][0].get_response().id == "1"
    assert got[0][0].as_numpy("OUTPUT0").tolist() == [list(range(1, 17))]
    assert got[1][0] is None
    assert "unexpected shape for input 'INPUT0'" in got[1][1].message()
    assert got[2][1].message().startswith("Request for unknown model")
    assert got[3][0].get_response().id == "4"
    assert received.empty()


async def test_aio_client(serving: Serving) -> None:
    async with aiogrpcclient.InferenceServerClient(serving.url) as client:
        assert await client.is_server_live()
        assert await client.is_model_ready("simple")
        assert not await client.is_model_ready("nope")
        result = await client.infer("simple", simple_inputs(), request_id="aio")
        assert result.get_response().id == "aio"
        assert result.as_numpy("OUTPUT1").tolist() == [list(range(-1, 15))]
        with pytest.raises(InferenceServerException) as info:
            await client.infer("nope", simple_inputs())
        assert info.value.status() == "StatusCode.NOT_FOUND"
        assert str(info.value.message()).startswith("Request for unknown model")


async def test_aio_stream_runs_concurrently_and_answers_in_order(serving: Serving) -> None:
    delays = [200, 0, 50, 0, 0]  # spin units: the first request computes the longest

    async def requests() -> AsyncIterator[dict[str, Any]]:
        for i, delay in enumerate(delays):
            yield {"model_name": "spin", "inputs": one_input("IN", delay), "request_id": str(i)}

    watch = PeakInFlight(serving.spin_scheduler())
    sampling = asyncio.run_coroutine_threadsafe(watch.run(), serving.thread.loop)
    try:
        async with aiogrpcclient.InferenceServerClient(serving.url) as client:
            ids, values = [], []
            async for result, error in client.stream_infer(requests()):
                assert error is None
                ids.append(result.get_response().id)
                values.append(int(result.as_numpy("OUT")[0]))
    finally:
        sampling.cancel()
    assert ids == ["0", "1", "2", "3", "4"]
    assert values == delays
    assert watch.peak >= 2  # later requests were submitted while the first was computing


async def test_cancelled_stream_cancels_its_requests(serving: Serving) -> None:
    scheduler = serving.spin_scheduler()  # spin has a single instance
    release = asyncio.Event()

    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "spin", "inputs": one_input("IN", 0), "request_id": "fast"}
        yield {"model_name": "spin", "inputs": one_input("IN", 500), "request_id": "busy"}
        yield {"model_name": "spin", "inputs": one_input("IN", 30_000), "request_id": "slow"}
        await release.wait()  # keep the stream open until the test is done

    async with aiogrpcclient.InferenceServerClient(serving.url) as client:
        stream = client.stream_infer(requests())
        result, error = await stream.__anext__()
        assert error is None
        assert result.get_response().id == "fast"
        stream.cancel()
        release.set()
        # the abandoned requests leave the scheduler at once, whatever the instance is doing
        drained = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(scheduler.drain(), 30), serving.thread.loop
        )
        await asyncio.wrap_future(drained)
        assert await client.is_server_ready()
        # "slow" was dropped before it ran: the one instance is free again after "busy"
        reply = await client.infer(
            "spin", one_input("IN", 0), request_id="after", client_timeout=20
        )
        assert reply.get_response().id == "after"


async def test_stream_error_as_status_when_asked(serving: Serving) -> None:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "spin", "inputs": one_input("IN", 0), "request_id": "ok"}
        yield {"model_name": "nope", "inputs": one_input("IN", 0), "request_id": "bad"}

    async with aiogrpcclient.InferenceServerClient(serving.url) as client:
        stream = client.stream_infer(requests(), headers={"triton_grpc_error": "true"})
        result, error = await stream.__anext__()
        assert error is None
        assert result.get_response().id == "ok"
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stream.__anext__()
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert str(info.value.details()).startswith("Request for unknown model")


def test_repository_control(serving: Serving, client: grpcclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index()
    assert "toggle" in [m.name for m in index.models]
    client.unload_model("toggle", unload_dependents=True)
    assert not client.is_model_ready("toggle")
    text = expect_error("StatusCode.NOT_FOUND", lambda: client.get_model_metadata("toggle"))
    assert text == "Request for unknown model: 'toggle' has no available versions"
    entry = next(m for m in client.get_model_repository_index().models if m.name == "toggle")
    assert (entry.version, entry.state, entry.reason) == ("2", "UNAVAILABLE", "unloaded")
    client.load_model(
        "toggle",
        config='{"max_batch_size":"16"}',
        files={"file:2/model.onnx": add_sub_model(offset=3)},
    )
    assert client.is_model_ready("toggle", "2")
    assert client.get_model_config("toggle").config.max_batch_size == 16  # the config parameter
    result = client.infer("toggle", simple_inputs())
    assert result.as_numpy("OUTPUT0").tolist() == [list(range(4, 20))]  # the uploaded file
    text = expect_error("StatusCode.NOT_FOUND", lambda: client.load_model("not_there"))
    assert text.startswith("failed to load 'not_there'")


def test_unsupported_extensions_answer_clearly(client: grpcclient.InferenceServerClient) -> None:
    # a front end started without a shared-memory registry has the extension off
    for call in (
        lambda: client.unregister_system_shared_memory(),
        lambda: client.register_system_shared_memory("r", "/key", 64),
    ):
        assert "shared memory is disabled" in expect_error("StatusCode.UNIMPLEMENTED", call)
    assert len(client.get_cuda_shared_memory_status().regions) == 0  # status answers, as Triton
    stats = client.get_inference_statistics("simple")
    assert [m.name for m in stats.model_stats] == ["simple"]
    expect_error("StatusCode.UNIMPLEMENTED", lambda: client.get_log_settings())

    infer_input = grpcclient.InferInput("IN", [1], "INT32")
    infer_input.set_shared_memory("r", 4)
    text = expect_error("StatusCode.UNIMPLEMENTED", lambda: client.infer("spin", [infer_input]))
    assert "shared memory is disabled" in text


def test_repository_name_and_load_parameters_are_checked(serving: Serving) -> None:
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    with grpc.insecure_channel(serving.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryModelLoad(
                service_pb2.RepositoryModelLoadRequest(repository_name="r", model_name="toggle")
            )
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        request = service_pb2.RepositoryModelLoadRequest(model_name="toggle")
        request.parameters["colour"].string_param = "blue"
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryModelLoad(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == (
            "unknown load parameter 'colour': expected 'config' or 'file:<version>/<path>'"
        )  # the words HTTP answers
        request = service_pb2.RepositoryModelUnloadRequest(model_name="toggle")
        request.parameters["unload_dependents"].string_param = "yes"
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryModelUnload(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == (
            "unload parameter 'unload_dependents' must be a boolean, got a string"
        )
        ready = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True))
        assert ready.models
        assert {m.state for m in ready.models} == {"READY"}
        typed = service_pb2.ModelInferRequest(model_name="spin", id="typed")
        typed.inputs.add(name="IN", datatype="INT32", shape=[1]).contents.int_contents.append(7)
        reply = stub.ModelInfer(typed)
        assert reply.id == "typed"
        assert np.frombuffer(reply.raw_output_contents[0], np.int32).tolist() == [7]


async def test_standard_health_service_when_installed(serving: Serving) -> None:
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc
    except Exception as exc:  # not installed, or built for another protobuf major version
        pytest.skip(f"grpcio-health-checking is not usable here: {exc}")
    async with grpc.aio.insecure_channel(serving.url) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    async with grpc.aio.insecure_channel(serving.url) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await watch.read()
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert caught.value.details() == "Watch is not supported"


# -- the same front end as the embedded server composes it, over the example repository ------


@pytest.fixture(scope="module")
def real_url(example_repo: Path) -> Iterator[str]:
    from inferd.server.embedded import InferenceServer

    with InferenceServer(example_repo, grpc_port=0) as server:
        yield f"127.0.0.1:{server.ports['grpc']}"


def test_real_repository_infer_and_stream(real_url: str) -> None:
    with grpcclient.InferenceServerClient(real_url) as client:
        assert client.get_model_config("simple").config.max_batch_size == 8
        a = np.arange(32, dtype=np.int32).reshape(2, 16)
        result = client.infer("simple", simple_inputs(a, np.ones_like(a)), request_id="real")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
        assert result.get_response().id == "real"

        strings = []
        for name in ("INPUT0", "INPUT1"):
            infer_input = grpcclient.InferInput(name, [1, 16], "BYTES")
            infer_input.set_data_from_numpy(np.array([[b"7"] * 16], dtype=object))
            strings.append(infer_input)
        assert client.infer("simple_string", strings).as_numpy("OUTPUT0")[0, 0] == b"14"

        received: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client.start_stream(callback=lambda result, error: received.put((result, error)))
        bad = simple_inputs(np.zeros((1, 3), np.int32), np.zeros((1, 3), np.int32))
        for request_id, inputs in (("a", simple_inputs()), ("b", bad), ("c", simple_inputs())):
            client.async_stream_infer("simple", inputs, request_id=request_id)
        client.stop_stream()
        got = [received.get(timeout=30) for _ in range(3)]
        assert got[0][0].get_response().id == "a"
        assert got[1][0] is None
        assert got[1][1] is not None
        assert got[2][0].get_response().id == "c"
        text = expect_error("StatusCode.NOT_FOUND", lambda: client.infer("nope", simple_inputs()))
        assert text.startswith("Request for unknown model")


def test_every_rpc_belongs_to_an_api_group() -> None:
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert sorted(API_BY_METHOD) == sorted(m.name for m in service.methods)


def test_undecodable_messages_are_invalid_argument(serving: Serving) -> None:
    with grpc.insecure_channel(serving.url) as channel:
        for method in ("ModelInfer", "ModelReady", "RepositoryModelLoad"):
            call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
            with pytest.raises(grpc.RpcError) as caught:
                call(b"\x0a\x05ab", timeout=10)  # a length-delimited field cut short
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "the request is not a valid 'inference." in str(caught.value.details())
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        replies = list(stream(iter([b"\xff\xff"]), timeout=10))
        reply = service_pb2.ModelStreamInferResponse.FromString(replies[0])
        assert reply.error_message.startswith("the request is not a valid 'inference.")


def test_model_names_are_checked_by_every_rpc(
    serving: Serving, client: grpcclient.InferenceServerClient
) -> None:
    bad = "../simple"
    for call in (
        lambda: client.is_model_ready(bad),
        lambda: client.get_model_metadata(bad),
        lambda: client.get_model_config(bad),
        lambda: client.get_inference_statistics(bad),
        lambda: client.infer(bad, simple_inputs()),
        lambda: client.load_model(bad),
        lambda: client.unload_model(bad),
    ):
        text = expect_error("StatusCode.INVALID_ARGUMENT", call)
        assert text == "invalid model name '../simple': must not contain '/' or '\\'"


def test_restricted_inference_covers_streams_and_health_service(serving: Serving) -> None:
    policy = AccessPolicy((parse_restriction("inference,health:Infer-Key=v"),))
    log = logging.getLogger("inferd.test.grpc")
    server, port = serving.thread.call(
        start_grpc_server(serving.stack.engine, "127.0.0.1", 0, log=log, access=policy)
    )
    url = f"127.0.0.1:{port}"
    denied = "This protocol is restricted, expecting header 'triton-grpc-protocol-Infer-Key'"
    try:
        with grpcclient.InferenceServerClient(url) as client:
            error = expect_error(  # as PROTOCOL.md says; not UNAVAILABLE, which clients retry
                "StatusCode.PERMISSION_DENIED", lambda: client.infer("simple", simple_inputs())
            )
            assert error == denied
            assert client.infer("simple", simple_inputs(), headers={"infer-key": "v"})
            assert client.get_model_metadata("simple").name == "simple"  # not restricted
            for headers, want in ((None, denied), ({"infer-key": "v"}, None)):
                results: queue.Queue[Any] = queue.Queue()
                client.start_stream(
                    lambda result, error, q=results: q.put(error or result), headers=headers
                )
                with contextlib.suppress(InferenceServerException):  # refused streams end at once
                    client.async_stream_infer("simple", simple_inputs())
                got = results.get(timeout=10)
                client.stop_stream()
                if want is None:
                    assert got.as_numpy("OUTPUT0") is not None
                else:
                    assert isinstance(got, InferenceServerException)
                    assert want in str(got)
        health = pytest.importorskip("grpc_health.v1.health_pb2")
        health_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")
        with grpc.insecure_channel(url) as channel:
            stub = health_grpc.HealthStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.Check(health.HealthCheckRequest(), timeout=10)
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
            ok = stub.Check(health.HealthCheckRequest(), timeout=10, metadata=(("infer-key", "v"),))
            assert ok.status == health.HealthCheckResponse.SERVING
    finally:
        serving.thread.call(server.stop(1.0))


def test_refused_calls_leave_no_reference_cycles(serving: Serving) -> None:
    """A refused call's request is freed when the call ends, not when the garbage collector
    next runs: a cycle through the error's traceback would keep a request's raw tensor data
    (up to gigabytes) alive, and the collector, counting objects and not bytes, runs late."""
    big = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        big.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        big.raw_input_contents.append(bytes(1 << 20))  # 1 MiB where 64 bytes are expected
    unknown = service_pb2.ModelMetadataRequest(name="no_such_model")

    def refused_calls(channel: grpc.Channel, stub: Any) -> None:
        for call in (
            lambda: stub.ModelInfer(big, timeout=10),
            lambda: stub.ModelMetadata(unknown, timeout=10),
            lambda: channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(
                b"\xff\xff", timeout=10
            ),
            lambda: list(
                stub.ModelStreamInfer(
                    iter([big]), timeout=10, metadata=(("triton_grpc_error", "true"),)
                )
            ),
        ):
            with pytest.raises(grpc.RpcError):
                call()

    # the server's own frames: those of the installed package, wherever the checkout lies (a
    # word in the path would also match the client's grpc frames under a ".venv" beside it)
    package_dir = os.path.dirname(inferd.__file__) + os.sep

    def server_garbage() -> list[str]:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            return [
                f"{o.f_code.co_qualname} ({o.f_code.co_filename})"
                for o in gc.garbage
                if isinstance(o, types.FrameType) and o.f_code.co_filename.startswith(package_dir)
            ]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()

    with grpc.insecure_channel(serving.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        refused_calls(channel, stub)  # warm: anything created once is created now
        gc.collect()
        gc.disable()  # nothing is collected behind the test's back
        try:
            refused_calls(channel, stub)
            assert server_garbage() == []
        finally:
            gc.enable()
