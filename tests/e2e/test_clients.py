"""The example repository served by ``inferd serve``, driven by every flavour of tritonclient."""

from __future__ import annotations

import gzip
import json
import queue
import zlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

from inferd.examples.build import MODEL_NAMES, digits_split
from inferd.testing import ServerProcess
from tests.e2e.conftest import raw_request

pytestmark = pytest.mark.e2e

EXAMPLE_MODELS = sorted(MODEL_NAMES)


@pytest.fixture
def http(server: ServerProcess) -> Any:
    client = httpclient.InferenceServerClient(server.http_url, concurrency=4)
    yield client
    client.close()


@pytest.fixture
def grpc(server: ServerProcess) -> Any:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


def _pair(n: int = 1) -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(16 * n, dtype=np.int32).reshape(n, 16)
    b = np.full((n, 16), 3, dtype=np.int32)
    return a, b


def _http_inputs(a: np.ndarray, b: np.ndarray, *, binary: bool, dtype: str = "INT32") -> list:
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        item = httpclient.InferInput(name, list(data.shape), dtype)
        item.set_data_from_numpy(data, binary_data=binary)
        inputs.append(item)
    return inputs


def _grpc_inputs(a: np.ndarray, b: np.ndarray, dtype: str = "INT32") -> list:
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        item = grpcclient.InferInput(name, list(data.shape), dtype)
        item.set_data_from_numpy(data)
        inputs.append(item)
    return inputs


def _text(array: np.ndarray) -> list[list[str]]:
    return [[v.decode() if isinstance(v, bytes) else v for v in row] for row in array.tolist()]


# -- health, metadata, configuration ----------------------------------------------------------


def test_http_health_and_metadata(http: Any) -> None:
    assert http.is_server_live()
    assert http.is_server_ready()
    for name in EXAMPLE_MODELS:
        assert http.is_model_ready(name)
    assert not http.is_model_ready("no_such_model")
    meta = http.get_server_metadata()
    assert meta["name"] == "triton"
    assert "model_repository" in meta["extensions"]
    assert "binary_tensor_data" in meta["extensions"]
    model = http.get_model_metadata("simple")
    assert model["name"] == "simple"
    assert model["versions"] == ["1"]
    assert model["platform"] == "onnxruntime_onnx"
    assert model["inputs"] == [
        {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]},
    ]
    assert [o["name"] for o in model["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert http.get_model_metadata("simple_string", "1")["inputs"][0]["datatype"] == "BYTES"


def test_http_config_is_rendered_like_triton(http: Any) -> None:
    config = http.get_model_config("simple")
    assert config["name"] == "simple"
    assert config["max_batch_size"] == 8
    assert isinstance(config["max_batch_size"], int)
    assert "dynamic_batching" not in config
    assert "sequence_batching" not in config
    assert config["model_transaction_policy"] == {"decoupled": False}
    assert config["response_cache"] == {"enable": False}
    assert config["input"][0]["data_type"] == "TYPE_INT32"
    assert config["input"][0]["dims"] == [16]
    assert config["input"][0]["format"] == "FORMAT_NONE"
    assert config["output"][1]["dims"] == [16]
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    digits = http.get_model_config("digits")
    assert digits["output"][1]["label_filename"] == "labels.txt"


def test_grpc_health_metadata_and_config(grpc: Any) -> None:
    assert grpc.is_server_live()
    assert grpc.is_server_ready()
    assert grpc.is_model_ready("simple_int8")
    assert not grpc.is_model_ready("no_such_model")
    assert grpc.get_server_metadata().name == "triton"
    meta = grpc.get_model_metadata("simple", "1")
    assert list(meta.versions) == ["1"]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    config = grpc.get_model_config("simple").config
    assert config.max_batch_size == 8
    assert not config.HasField("dynamic_batching")
    assert config.WhichOneof("scheduling_choice") is None
    as_json = grpc.get_model_config("simple", as_json=True)
    assert as_json["config"]["input"][0]["dims"] == ["16"]  # protobuf JSON: int64 as strings


# -- inference over HTTP ----------------------------------------------------------------------


@pytest.mark.parametrize("binary", [False, True])
def test_http_infer_json_and_binary(http: Any, binary: bool) -> None:
    a, b = _pair(2)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=not binary),
    ]
    result = http.infer("simple", _http_inputs(a, b, binary=binary), outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response["model_name"] == "simple"
    assert response["model_version"] == "1"


def test_http_requested_output_subset_and_request_id(http: Any) -> None:
    a, b = _pair()
    result = http.infer(
        "simple",
        _http_inputs(a, b, binary=True),
        outputs=[httpclient.InferRequestedOutput("OUTPUT1")],
        request_id="req-42",
    )
    response = result.get_response()
    assert response["id"] == "req-42"
    assert [o["name"] for o in response["outputs"]] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    # without an id the response carries none
    assert "id" not in http.infer("simple", _http_inputs(a, b, binary=True)).get_response()


@pytest.mark.parametrize("binary", [False, True])
def test_http_bytes_model(http: Any, binary: bool) -> None:
    a = np.array([[str(i).encode() for i in range(16)]], dtype=np.object_)
    b = np.array([[b"-5"] * 16], dtype=np.object_)
    result = http.infer(
        "simple_string",
        _http_inputs(a, b, binary=binary, dtype="BYTES"),
        outputs=[
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary),
        ],
    )
    # JSON strings come back as str, binary BYTES as bytes (tritonclient's decoding)
    assert _text(result.as_numpy("OUTPUT0")) == [[str(i - 5) for i in range(16)]]
    assert _text(result.as_numpy("OUTPUT1")) == [[str(i + 5) for i in range(16)]]


def test_http_int8_wraps_around(http: Any) -> None:
    a = np.array([[127, -128, 1, 0] * 4], dtype=np.int8)
    b = np.array([[1, 1, -1, 0] * 4], dtype=np.int8)
    result = http.infer("simple_int8", _http_inputs(a, b, binary=False, dtype="INT8"))
    out0 = result.as_numpy("OUTPUT0")
    assert out0.dtype == np.int8
    assert out0.tolist() == [[-128, -127, 0, 0] * 4]
    assert result.as_numpy("OUTPUT1").tolist() == [[126, 127, 2, 0] * 4]


@pytest.mark.parametrize(
    ("request_coding", "response_coding"), [("gzip", "deflate"), ("deflate", "gzip")]
)
def test_http_compression_with_tritonclient(
    http: Any, request_coding: str, response_coding: str
) -> None:
    a, b = _pair(3)
    result = http.infer(
        "simple",
        _http_inputs(a, b, binary=True),
        request_compression_algorithm=request_coding,
        response_compression_algorithm=response_coding,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_http_compression_on_the_wire(server: ServerProcess, coding: str) -> None:
    body = json.dumps(
        {
            "inputs": [
                {"name": n, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
                for n in ("INPUT0", "INPUT1")
            ]
        }
    ).encode()
    packed = gzip.compress(body) if coding == "gzip" else zlib.compress(body)
    reply = raw_request(
        server.http_url,
        "POST",
        "/v2/models/simple/infer",
        packed,
        {"Content-Encoding": coding, "Accept-Encoding": coding},
    )
    assert reply.status == 200
    assert reply.headers["content-encoding"] == coding
    plain = gzip.decompress(reply.body) if coding == "gzip" else zlib.decompress(reply.body)
    outputs = {o["name"]: o["data"] for o in json.loads(plain)["outputs"]}
    assert outputs["OUTPUT0"] == [2 * i for i in range(16)]
    # non-inference replies are never compressed, whatever the client accepts
    meta = raw_request(server.http_url, "GET", "/v2", headers={"Accept-Encoding": coding})
    assert "content-encoding" not in meta.headers
    assert meta.json()["name"] == "triton"


def test_http_async_infer(http: Any) -> None:
    pending = []
    for n in range(1, 5):
        a, b = _pair(n)
        pending.append((a, b, http.async_infer("simple", _http_inputs(a, b, binary=True))))
    for a, b, request in pending:
        result = request.get_result()
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_digits_classifier(http: Any, grpc: Any) -> None:
    _, x_test, _, y_test = digits_split()
    images = np.asarray(x_test[:32], dtype=np.float32)
    truth = np.asarray(y_test[:32])
    pixels = httpclient.InferInput("input", list(images.shape), "FP32")
    pixels.set_data_from_numpy(images)
    result = http.infer("digits", [pixels])
    labels = result.as_numpy("label").reshape(-1)
    probabilities = result.as_numpy("probabilities")
    assert labels[0] == truth[0]  # the first held-out digit is recognised
    assert (labels == truth).mean() >= 0.9  # the model's held-out accuracy is 97 %
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-4)

    # classification extension over gRPC: three "<probability>:<index>:<label>" strings per row
    one = grpcclient.InferInput("input", [1, 64], "FP32")
    one.set_data_from_numpy(images[:1])
    top = grpc.infer(
        "digits",
        [one],
        outputs=[grpcclient.InferRequestedOutput("probabilities", class_count=3)],
    ).as_numpy("probabilities")
    assert top.shape == (1, 3)
    fields = [entry.decode().split(":") for entry in top[0]]
    assert all(len(f) == 3 for f in fields)
    assert int(fields[0][1]) == truth[0]
    assert fields[0][2] == str(truth[0])
    values = [float(f[0]) for f in fields]
    assert values == sorted(values, reverse=True)
    assert values[0] == pytest.approx(float(probabilities[0].max()), abs=1e-5)


# -- inference over gRPC ----------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
def test_grpc_infer(grpc: Any, compression: str | None) -> None:
    a, b = _pair(2)
    result = grpc.infer(
        "simple",
        _grpc_inputs(a, b),
        outputs=[grpcclient.InferRequestedOutput("OUTPUT0")],
        request_id="g-1",
        compression_algorithm=compression,
        headers={"test": "1"},
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    assert result.as_numpy("OUTPUT1") is None
    response = result.get_response()
    assert response.id == "g-1"
    assert response.model_version == "1"


def test_grpc_bytes_and_int8(grpc: Any) -> None:
    a = np.array([[str(10 * i).encode() for i in range(16)]], dtype=np.object_)
    b = np.array([[b"1"] * 16], dtype=np.object_)
    result = grpc.infer("simple_string", _grpc_inputs(a, b, "BYTES"))
    assert result.as_numpy("OUTPUT0").tolist() == [[str(10 * i + 1).encode() for i in range(16)]]
    c = np.full((1, 16), 100, dtype=np.int8)
    result = grpc.infer("simple_int8", _grpc_inputs(c, c, "INT8"))
    assert result.as_numpy("OUTPUT0").tolist() == [[-56] * 16]  # 200 wraps to -56
    assert result.as_numpy("OUTPUT1").tolist() == [[0] * 16]


def test_grpc_async_infer(grpc: Any) -> None:
    done: queue.Queue[tuple[Any, Any]] = queue.Queue()
    a, b = _pair(4)
    grpc.async_infer(
        "simple",
        _grpc_inputs(a, b),
        callback=lambda result, error: done.put((result, error)),
        request_id="async-1",
    )
    result, error = done.get(timeout=30)
    assert error is None
    assert result.get_response().id == "async-1"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_grpc_stream_with_a_failing_request(grpc: Any) -> None:
    """One bad request in the middle of a stream fails alone; the stream keeps going."""
    done: queue.Queue[tuple[Any, Any]] = queue.Queue()
    grpc.start_stream(callback=lambda result, error: done.put((result, error)))
    try:
        a, b = _pair()
        grpc.async_stream_infer("simple", _grpc_inputs(a, b), request_id="s-1")
        grpc.async_stream_infer("no_such_model", _grpc_inputs(a, b), request_id="s-2")
        bad = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
        bad.set_data_from_numpy(a)
        grpc.async_stream_infer("simple", [bad], request_id="s-3")  # INPUT1 missing
        grpc.async_stream_infer(
            "simple_int8",
            _grpc_inputs(a.astype(np.int8), b.astype(np.int8), "INT8"),
            request_id="s-4",
        )
        replies = [done.get(timeout=30) for _ in range(4)]
    finally:
        grpc.stop_stream()
    (ok1, err1), (res2, err2), (res3, err3), (ok4, err4) = replies
    assert err1 is None
    assert ok1.get_response().id == "s-1"
    np.testing.assert_array_equal(ok1.as_numpy("OUTPUT0"), a + b)
    assert res2 is None
    assert isinstance(err2, InferenceServerException)
    assert err2.message().startswith("Request for unknown model")
    assert res3 is None
    assert "INPUT1" in err3.message()
    assert err4 is None
    assert ok4.get_response().id == "s-4"
    np.testing.assert_array_equal(ok4.as_numpy("OUTPUT1"), (a - b).astype(np.int8))


# -- the asyncio clients ----------------------------------------------------------------------


@pytest.fixture
async def aio_http(server: ServerProcess) -> AsyncIterator[Any]:
    client = aiohttpclient.InferenceServerClient(server.http_url)
    yield client
    await client.close()


@pytest.fixture
async def aio_grpc(server: ServerProcess) -> AsyncIterator[Any]:
    client = aiogrpcclient.InferenceServerClient(server.grpc_url)
    yield client
    await client.close()


async def test_aio_http(aio_http: Any) -> None:
    assert await aio_http.is_server_live()
    assert await aio_http.is_server_ready()
    assert await aio_http.is_model_ready("simple")
    assert (await aio_http.get_server_metadata())["name"] == "triton"
    assert (await aio_http.get_model_metadata("digits"))["inputs"][0]["shape"] == [-1, 64]
    assert (await aio_http.get_model_config("simple"))["max_batch_size"] == 8
    index = await aio_http.get_model_repository_index()
    assert sorted(e["name"] for e in index) == EXAMPLE_MODELS
    a, b = _pair(2)
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        item = aiohttpclient.InferInput(name, [2, 16], "INT32")
        item.set_data_from_numpy(data)
        inputs.append(item)
    # aiohttp asks for gzip on every request: the server compresses the reply, the client
    # inflates it itself
    result = await aio_http.infer("simple", inputs, request_id="aio-1")
    assert result.get_response()["id"] == "aio-1"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    result = await aio_http.infer("simple", inputs, request_compression_algorithm="deflate")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    with pytest.raises(InferenceServerException) as caught:
        await aio_http.infer("no_such_model", inputs)
    assert caught.value.message().startswith("Request for unknown model")
    assert caught.value.status() == "404"


async def test_aio_grpc_infer_and_stream(aio_grpc: Any) -> None:
    assert await aio_grpc.is_server_ready()
    assert (await aio_grpc.get_model_config("simple")).config.max_batch_size == 8
    a, b = _pair()

    def inputs(model_dtype: str = "INT32") -> list:
        items = []
        for name, data in (("INPUT0", a), ("INPUT1", b)):
            item = aiogrpcclient.InferInput(name, [1, 16], model_dtype)
            item.set_data_from_numpy(data.astype(np.int8 if model_dtype == "INT8" else np.int32))
            items.append(item)
        return items

    result = await aio_grpc.infer("simple", inputs(), compression_algorithm="gzip")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)

    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "simple", "inputs": inputs(), "request_id": "1"}
        yield {"model_name": "simple", "inputs": inputs()[:1], "request_id": "2"}  # fails
        yield {"model_name": "simple_int8", "inputs": inputs("INT8"), "request_id": "3"}

    replies = [pair async for pair in aio_grpc.stream_infer(requests())]
    assert len(replies) == 3
    (r1, e1), (r2, e2), (r3, e3) = replies
    assert e1 is None
    assert r1.get_response().id == "1"
    assert r2 is None
    assert isinstance(e2, InferenceServerException)
    assert "missing required input" in e2.message()
    assert e3 is None
    assert r3.get_response().id == "3"
    np.testing.assert_array_equal(r3.as_numpy("OUTPUT0"), (a + b).astype(np.int8))


# -- model control is refused outside explicit mode ------------------------------------------


def test_load_and_unload_refused_in_none_mode(http: Any, grpc: Any) -> None:
    message = "explicit model load / unload is not allowed"
    with pytest.raises(InferenceServerException, match=message) as caught:
        http.load_model("simple")
    assert caught.value.status() == "503"
    with pytest.raises(InferenceServerException, match=message):
        http.unload_model("simple")
    with pytest.raises(InferenceServerException, match=message) as caught:
        grpc.load_model("simple")
    assert caught.value.status() == "StatusCode.UNAVAILABLE"
    with pytest.raises(InferenceServerException, match=message):
        grpc.unload_model("digits")
    assert http.is_model_ready("simple")
    assert grpc.is_model_ready("digits")
