"""Every class of bad request gets its status and message, and the server keeps serving."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc as grpclib
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import RawReply, raw_request

pytestmark = pytest.mark.e2e

MAX_BODY = 64 * 1024
INFER = "/v2/models/simple/infer"
ROW = list(range(16))


@pytest.fixture(scope="module")
def server(example_repo: Path) -> Iterator[ServerProcess]:
    with running_server([example_repo], ["--http-max-input-size", str(MAX_BODY)]) as proc:
        yield proc


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[Any]:
    with grpclib.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _assert_still_serving(server: ServerProcess) -> None:
    """A good request on a new connection, over both protocols, after every bad one."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    with httpclient.InferenceServerClient(server.http_url) as client:
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for item in inputs:
            item.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), 2 * a)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for item in inputs:
            item.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT1"), 0 * a)


def _json_infer(*inputs: dict[str, Any]) -> bytes:
    return json.dumps({"inputs": list(inputs)}).encode()


def _tensor(name: str, shape: list[int], data: Any, datatype: str = "INT32") -> dict[str, Any]:
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


def _post(server: ServerProcess, body: bytes, path: str = INFER, **headers: str) -> RawReply:
    return raw_request(server.http_url, "POST", path, body, headers)


# -- HTTP ---------------------------------------------------------------------------------------

GOOD = (_tensor("INPUT0", [1, 16], ROW), _tensor("INPUT1", [1, 16], ROW))

HTTP_BAD_REQUESTS = [
    pytest.param(
        b'{"inputs": [', "failed to parse the inference request JSON", id="malformed-json"
    ),
    pytest.param(b"[1, 2]", "", id="json-not-an-object"),
    pytest.param(
        _json_infer(_tensor("INPUT0", [1, 16], ROW, "INT33"), GOOD[1]),
        "invalid datatype 'INT33'",
        id="unknown-datatype",
    ),
    pytest.param(
        _json_infer(_tensor("INPUT0", [1, 16], ROW[:3]), GOOD[1]),
        "unexpected number of elements for input 'INPUT0'",
        id="data-length",
    ),
    pytest.param(_json_infer(GOOD[0]), "missing required input(s) ['INPUT1']", id="missing-input"),
    pytest.param(
        _json_infer(*GOOD, _tensor("EXTRA", [1, 16], ROW)),
        "unexpected inference input 'EXTRA'",
        id="unexpected-input",
    ),
    pytest.param(
        _json_infer(_tensor("INPUT0", [10**11, 10**11], ROW), GOOD[1]),
        "is too large",
        id="absurd-shape",
    ),
    pytest.param(
        _json_infer(_tensor("INPUT0", [-1, 16], ROW), GOOD[1]),
        "must be a list of non-negative integers",
        id="negative-shape",
    ),
    pytest.param(
        _json_infer(_tensor("INPUT0", [1, 16], ROW, "FP32"), GOOD[1]),
        "got FP32, expecting INT32",
        id="wrong-datatype",
    ),
    pytest.param(
        _json_infer(_tensor("INPUT0", [1, 17], [*ROW, 0]), _tensor("INPUT1", [1, 17], [*ROW, 0])),
        "INPUT0",
        id="wrong-dims",
    ),
    pytest.param(
        _json_infer(_tensor("INPUT0", [9, 16], ROW * 9), _tensor("INPUT1", [9, 16], ROW * 9)),
        "batch-size must be <= 8",
        id="batch-too-large",
    ),
    pytest.param(
        b'{"inputs": [{"name": "\xff\xfe", "shape": [1], "datatype": "INT32", "data": [1]}]}',
        "UTF-8",
        id="invalid-utf8",
    ),
    pytest.param(
        json.dumps({"inputs": list(GOOD), "parameters": {"triton_x": True}}).encode(),
        "triton_x",
        id="reserved-parameter",
    ),
]


@pytest.mark.parametrize(("body", "message"), HTTP_BAD_REQUESTS)
def test_http_bad_infer_request(server: ServerProcess, body: bytes, message: str) -> None:
    reply = _post(server, body)
    assert reply.status == 400, reply.body
    assert reply.headers["content-type"] == "application/json"
    assert message in reply.error
    _assert_still_serving(server)


def _binary_request(declared: list[int], blobs: list[bytes]) -> tuple[bytes, str]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": [1, 16],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": size},
                }
                for name, size in zip(("INPUT0", "INPUT1"), declared, strict=True)
            ]
        }
    ).encode()
    return header + b"".join(blobs), str(len(header))


@pytest.mark.parametrize(
    ("declared", "blobs"),
    [
        pytest.param([64, 64], [bytes(64), bytes(60)], id="body-shorter-than-declared"),
        pytest.param([64, 64], [bytes(64), bytes(68)], id="body-longer-than-declared"),
        pytest.param([60, 64], [bytes(60), bytes(64)], id="declared-size-not-shape-x-dtype"),
    ],
)
def test_http_binary_size_mismatch(
    server: ServerProcess, declared: list[int], blobs: list[bytes]
) -> None:
    body, header_length = _binary_request(declared, blobs)
    reply = _post(server, body, **{"Inference-Header-Content-Length": header_length})
    assert reply.status == 400, reply.body
    assert reply.error
    _assert_still_serving(server)


def test_http_binary_without_header_length(server: ServerProcess) -> None:
    header_only, _ = _binary_request([64, 64], [])
    reply = _post(server, header_only)
    assert reply.status == 400
    assert "Header-Content-Length" in reply.error
    _assert_still_serving(server)


def test_http_oversized_bodies(server: ServerProcess) -> None:
    big = _json_infer(_tensor("INPUT0", [1, 16], [0] * (MAX_BODY // 2)), GOOD[1])
    assert len(big) > MAX_BODY
    reply = _post(server, big)
    assert reply.status == 413
    assert str(MAX_BODY) in reply.error
    # small on the wire, too large once inflated
    bomb = gzip.compress(b" " * (MAX_BODY * 4))
    assert len(bomb) < MAX_BODY
    reply = _post(server, bomb, **{"Content-Encoding": "gzip"})
    assert reply.status == 413
    reply = _post(server, b"not gzip", **{"Content-Encoding": "gzip"})
    assert reply.status == 400
    reply = _post(server, _json_infer(*GOOD), **{"Content-Encoding": "br"})
    assert reply.status == 400
    assert "Content-Encoding" in reply.error
    _assert_still_serving(server)


@pytest.mark.parametrize(
    ("method", "path", "status", "message"),
    [
        ("POST", "/v2/models/simple/versions/abc/infer", 404, "Not Found"),
        ("GET", "/v2/models/simple/versions/one", 404, "Not Found"),
        ("GET", "/v2/models/simple/versions/7", 404, "Request for unknown model"),
        ("GET", "/v2/models/no_such_model", 404, "Request for unknown model"),
        ("GET", "/v2/models/no_such_model/config", 404, "Request for unknown model"),
        ("GET", "/v2/nothing/here", 404, "Not Found"),
        ("GET", INFER, 405, "Method Not Allowed"),
        ("POST", "/v2/health/live", 405, "Method Not Allowed"),
    ],
)
def test_http_routing_errors(
    server: ServerProcess, method: str, path: str, status: int, message: str
) -> None:
    body = _json_infer(*GOOD) if method == "POST" else None
    reply = raw_request(server.http_url, method, path, body)
    assert reply.status == status
    assert reply.error.startswith(message)
    _assert_still_serving(server)


def test_http_unknown_model_with_tritonclient(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for item in inputs:
            item.set_data_from_numpy(np.zeros((1, 16), np.int32))
        with pytest.raises(InferenceServerException) as caught:
            client.infer("no_such_model", inputs)
        assert caught.value.message().startswith("Request for unknown model")
        assert caught.value.status() == "404"
        with pytest.raises(InferenceServerException) as caught:
            client.get_model_metadata("simple", model_version="7")
        assert caught.value.message().startswith("Request for unknown model")
    _assert_still_serving(server)


# -- gRPC ---------------------------------------------------------------------------------------


def _grpc_request(**overrides: Any) -> Any:
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        del tensor
        request.raw_input_contents.append(np.arange(16, dtype=np.int32).tobytes())
    for key, value in overrides.items():
        setattr(request, key, value)
    return request


def _grpc_cases() -> list[Any]:
    wrong_size = _grpc_request()
    wrong_size.raw_input_contents[1] = bytes(60)
    missing = _grpc_request()
    del missing.inputs[1]
    del missing.raw_input_contents[1]
    mixed = _grpc_request()
    mixed.inputs[0].contents.int_contents.extend(range(16))
    unknown_dtype = _grpc_request()
    unknown_dtype.inputs[0].datatype = "INT33"
    absurd = _grpc_request()
    absurd.inputs[0].shape[:] = [10**11, 10**11]
    batch = _grpc_request()
    for tensor, raw in zip(batch.inputs, range(2), strict=True):
        tensor.shape[:] = [9, 16]
        batch.raw_input_contents[raw] = bytes(9 * 64)
    return [
        pytest.param(
            _grpc_request(model_version="abc"),
            grpclib.StatusCode.INVALID_ARGUMENT,
            "failed to get model version from specified version string 'abc'",
            id="version-not-a-number",
        ),
        pytest.param(
            _grpc_request(model_name="no_such_model"),
            grpclib.StatusCode.NOT_FOUND,
            "Request for unknown model",
            id="unknown-model",
        ),
        pytest.param(
            _grpc_request(model_version="9"),
            grpclib.StatusCode.NOT_FOUND,
            "Request for unknown model",
            id="unknown-version",
        ),
        pytest.param(wrong_size, grpclib.StatusCode.INVALID_ARGUMENT, "INPUT1", id="raw-size"),
        pytest.param(missing, grpclib.StatusCode.INVALID_ARGUMENT, "INPUT1", id="missing-input"),
        pytest.param(
            mixed,
            grpclib.StatusCode.INVALID_ARGUMENT,
            "contents field must not be specified when using raw_input_contents",
            id="contents-and-raw",
        ),
        pytest.param(
            unknown_dtype, grpclib.StatusCode.INVALID_ARGUMENT, "INT33", id="unknown-datatype"
        ),
        pytest.param(absurd, grpclib.StatusCode.INVALID_ARGUMENT, "INPUT0", id="absurd-shape"),
        pytest.param(
            batch, grpclib.StatusCode.INVALID_ARGUMENT, "batch-size must be <= 8", id="batch"
        ),
    ]


@pytest.mark.parametrize(("request_message", "code", "message"), _grpc_cases())
def test_grpc_bad_infer_request(
    server: ServerProcess, stub: Any, request_message: Any, code: Any, message: str
) -> None:
    with pytest.raises(grpclib.RpcError) as caught:
        stub.ModelInfer(request_message, timeout=30)
    assert caught.value.code() == code
    assert message in caught.value.details()
    _assert_still_serving(server)


def test_grpc_errors_through_tritonclient(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.get_model_metadata("simple", model_version="abc")
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert caught.value.message().startswith("failed to get model version")
        with pytest.raises(InferenceServerException) as caught:
            client.get_model_config("no_such_model")
        assert caught.value.status() == "StatusCode.NOT_FOUND"
        assert caught.value.message().startswith("Request for unknown model")
        # readiness of an unknown model is an answer, not an error
        assert client.is_model_ready("no_such_model") is False
    _assert_still_serving(server)
