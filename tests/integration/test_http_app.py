"""The HTTP front end, in process (httpx over ASGI) and over a real socket (tritonclient).

Both run over the real stack (repository manager, ONNX Runtime backend, engine) serving the
models of ``tests/integration/conftest.py``.
"""

from __future__ import annotations

import base64
import gzip
import logging
import socket
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
import pytest_asyncio
import tritonclient.http as th
import tritonclient.http.aio as th_aio
from tritonclient.utils import InferenceServerException

from inferd.frontends.http.app import HttpApp
from inferd.frontends.http.server import HttpServer, start_http_server
from tests.helpers.models import add_sub_model
from tests.integration.conftest import ECHO_TYPES, LoopThread, Stack, start_stack

LIMIT = 64 * 1024
#: the in-process tests share one stack, built on the module's event loop
in_process = pytest.mark.asyncio(loop_scope="module")


def _make_app(stack: Stack) -> HttpApp:
    return HttpApp(stack.engine, max_body_bytes=LIMIT, log=logging.getLogger("test.http"))


# ------------------------------------------------------------------------------------------------
# in process, through the ASGI interface
# ------------------------------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(serving_roots: list[Path]) -> AsyncIterator[Stack]:
    built = await start_stack(serving_roots, server_version="0.1.0")
    try:
        yield built
    finally:
        await built.manager.close()


@pytest_asyncio.fixture(loop_scope="module")
async def client(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=_make_app(stack))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


def _simple_inputs(binary: bool) -> list[th.InferInput]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [th.InferInput("INPUT0", [1, 16], "INT32"), th.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


@in_process
async def test_health_and_server_metadata(client: httpx.AsyncClient) -> None:
    for path, body in (("/v2/health/live", {"live": True}), ("/v2/health/ready", {"ready": True})):
        r = await client.get(path + "?test_1=1&test_2=2")
        assert r.status_code == 200
        assert r.json() == body  # the KServe SDK reads these bodies; tritonclient the status
    r = await client.get("/v2/models/simple/ready?test_1=1&test_2=2")
    assert r.status_code == 200
    assert r.content == b""
    assert r.headers["content-length"] == "0"
    r = await client.get("/v2")
    assert r.json()["name"] == "triton"
    assert "binary_tensor_data" in r.json()["extensions"]
    r = await client.get("/v2/models/nope/ready")
    assert r.status_code == 400
    assert r.json() == {"error": "Model version not ready"}


@in_process
async def test_model_metadata_and_config(client: httpx.AsyncClient) -> None:
    r = await client.get("/v2/models/simple")
    assert r.json() == {
        "name": "simple",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
            {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]},
            {"name": "OUTPUT1", "datatype": "INT32", "shape": [-1, 16]},
        ],
    }
    r = await client.get("/v2/models/simple/versions/1/config")
    assert r.status_code == 200
    assert r.json()["max_batch_size"] == 8
    assert r.json()["input"][0]["data_type"] == "TYPE_INT32"
    r = await client.get("/v2/models/nope")
    assert r.status_code == 404
    assert r.json()["error"].startswith("Request for unknown model")


@in_process
async def test_routing_errors(client: httpx.AsyncClient) -> None:
    r = await client.get("/v3/whatever")
    assert (r.status_code, r.json()) == (404, {"error": "Not Found"})
    r = await client.get("/v2/models/simple/versions/x")
    assert r.status_code == 404
    r = await client.post("/v2/health/live")
    assert (r.status_code, r.json()) == (405, {"error": "Method Not Allowed"})
    r = await client.get("/v2/models/simple/infer")
    assert r.status_code == 405
    r = await client.get("/v2/models/simple/stats")
    assert r.status_code == 200
    assert [m["name"] for m in r.json()["model_stats"]] == ["simple"]


@pytest.mark.parametrize("binary", [True, False])
@in_process
async def test_infer_simple(client: httpx.AsyncClient, binary: bool) -> None:
    outputs = [th.InferRequestedOutput("OUTPUT1", binary_data=binary)]
    body, header_length = th.InferenceServerClient.generate_request_body(
        _simple_inputs(binary), outputs=outputs, request_id="req-7"
    )
    headers = (
        {} if header_length is None else {"Inference-Header-Content-Length": str(header_length)}
    )
    r = await client.post("/v2/models/simple/infer", content=body, headers=headers)
    assert r.status_code == 200, r.text
    hl = r.headers.get("inference-header-content-length")
    assert (hl is not None) == binary
    assert r.headers["content-type"] == (
        "application/octet-stream" if binary else "application/json"
    )
    result = th.InferenceServerClient.parse_response_body(
        r.content, header_length=int(hl) if hl else None
    )
    assert result.get_response()["id"] == "req-7"
    assert result.get_response()["model_version"] == "1"
    assert result.as_numpy("OUTPUT0") is None  # only the requested subset
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.arange(16).reshape(1, 16) - 1)


@in_process
async def test_infer_bytes(client: httpx.AsyncClient) -> None:
    data = np.array([[b"a", "é".encode(), b""]], dtype=object)
    infer_input = th.InferInput("INPUT0", [1, 3], "BYTES")
    infer_input.set_data_from_numpy(data)
    body, hl = th.InferenceServerClient.generate_request_body([infer_input])
    r = await client.post(
        "/v2/models/identity/infer",
        content=body,
        headers={"Inference-Header-Content-Length": str(hl)},
    )
    result = th.InferenceServerClient.parse_response_body(
        r.content, header_length=int(r.headers["inference-header-content-length"])
    )
    assert result.as_numpy("OUTPUT0").tolist() == data.tolist()
    assert "id" not in result.get_response()


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
@in_process
async def test_compression_both_directions(client: httpx.AsyncClient, coding: str) -> None:
    body, hl = th.InferenceServerClient.generate_request_body(_simple_inputs(True))
    packed = gzip.compress(body) if coding == "gzip" else zlib.compress(body)
    r = await client.post(
        "/v2/models/simple/infer",
        content=packed,
        headers={
            "Inference-Header-Content-Length": str(hl),
            "Content-Encoding": coding,
            "Accept-Encoding": f"br, {coding};q=0.9, identity;q=0.1",
        },
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-encoding"] == coding
    # httpx undoes Content-Encoding itself; check the raw reply is compressed too
    assert int(r.headers["content-length"]) != len(r.content)
    result = th.InferenceServerClient.parse_response_body(
        r.content, header_length=int(r.headers["inference-header-content-length"])
    )
    assert result.as_numpy("OUTPUT0").tolist()[0] == list(range(1, 17))
    # non-infer responses are never compressed
    r = await client.get("/v2", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in r.headers


@in_process
async def test_bad_requests_and_limits(client: httpx.AsyncClient) -> None:
    url = "/v2/models/simple/infer"
    r = await client.post(url, content=b'{"inputs": [')
    assert r.status_code == 400
    assert "failed to parse" in r.json()["error"]
    r = await client.post(url, content=b"x" * (LIMIT + 1))
    assert r.status_code == 413
    assert str(LIMIT) in r.json()["error"]
    bomb = gzip.compress(b"\0" * (LIMIT * 4))
    r = await client.post(url, content=bomb, headers={"Content-Encoding": "gzip"})
    assert r.status_code == 413
    r = await client.post(url, content=b"{}", headers={"Content-Encoding": "br"})
    assert r.status_code == 400
    assert "'br'" in r.json()["error"]
    r = await client.post(url, content=b"{}", headers={"Inference-Header-Content-Length": "x"})
    assert r.status_code == 400
    r = await client.post(url, content=b'{"inputs": []}')
    assert r.status_code == 400  # the engine's validation: missing inputs
    # onnxruntime fails at run time (Cast of non-numeric text): the request's content is at
    # fault, so a 400 with the runtime's one-line reason and no traceback
    failing = _json_infer("X", "BYTES", ["not a number"])
    r = await client.post("/v2/models/failing/infer", content=failing)
    assert r.status_code == 400
    assert "model 'failing' failed in onnxruntime" in r.json()["error"]
    assert "Cast" in r.json()["error"]
    assert "Traceback" not in r.text
    r = await client.post("/v2/models/nope/infer", content=b'{"inputs": []}')
    assert r.status_code == 404


def _json_infer(name: str, datatype: str, data: list[Any]) -> bytes:
    inp = {"name": name, "datatype": datatype, "shape": [len(data)], "data": data}
    return orjson.dumps({"inputs": [inp]})


@in_process
async def test_repository_endpoints(client: httpx.AsyncClient) -> None:
    r = await client.post("/v2/repository/index")
    assert {"name": "never_loaded"} in r.json()
    assert {"name": "simple", "version": "1", "state": "READY"} in r.json()
    r = await client.post("/v2/repository/index", json={"ready": True})
    assert {"name": "never_loaded"} not in r.json()
    # a model that exists only as the load request's config and files
    params = {
        "config": '{"max_batch_size": "16"}',
        "file:1/model.onnx": base64.b64encode(add_sub_model(offset=5)).decode(),
    }
    r = await client.post("/v2/repository/models/m/load", json={"parameters": params})
    assert (r.status_code, r.content) == (200, b"")
    r = await client.get("/v2/models/m/config")
    assert r.json()["max_batch_size"] == 16  # the config parameter was honoured
    body, hl = th.InferenceServerClient.generate_request_body(_simple_inputs(True))
    r = await client.post(
        "/v2/models/m/infer", content=body, headers={"Inference-Header-Content-Length": str(hl)}
    )
    result = th.InferenceServerClient.parse_response_body(
        r.content, header_length=int(r.headers["inference-header-content-length"])
    )
    assert result.as_numpy("OUTPUT0").tolist()[0] == list(range(6, 22))  # the uploaded file ran
    r = await client.post("/v2/repository/models/m2/load")
    assert r.status_code == 200
    assert (await client.get("/v2/models/m2/ready")).status_code == 200
    r = await client.post(
        "/v2/repository/models/m/unload", json={"parameters": {"unload_dependents": True}}
    )
    assert r.status_code == 200
    assert (await client.get("/v2/models/m/ready")).status_code == 400
    r = await client.post("/v2/repository/index")
    assert {"name": "m", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"} in r.json()
    r = await client.post(
        "/v2/repository/models/m/load", json={"parameters": {"file:x": "not base64!"}}
    )
    assert r.status_code == 400
    assert "base64" in r.json()["error"]
    r = await client.post("/v2/repository/models/not_there/load")
    assert r.status_code == 404  # the client named a model the repository does not hold
    assert r.json()["error"].startswith("failed to load 'not_there'")


# ------------------------------------------------------------------------------------------------
# over a real socket: inferd's HTTP/1.1 edge (httptools) on uvloop, driven by tritonclient
# ------------------------------------------------------------------------------------------------


class _ServerThread:
    """The HTTP server over its own stack on a uvloop thread, as ``inferd serve`` runs it."""

    def __init__(self, roots: list[Path], thread: LoopThread) -> None:
        self._thread = thread
        self.stack = thread.call(start_stack(roots, server_version="0.1.0"))
        self.app = _make_app(self.stack)
        self.handle: HttpServer
        self.handle, self.port = self.call(start_http_server(self.app, "127.0.0.1", 0))

    def call(self, coro: Any) -> Any:
        return self._thread.call(coro)

    def close(self) -> None:
        self.call(self.handle.stop(1.0))
        self.call(self.stack.manager.close())


@pytest.fixture(scope="module")
def served(serving_roots: list[Path], loop_thread: LoopThread) -> Iterator[_ServerThread]:
    server = _ServerThread(serving_roots, loop_thread)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def triton(served: _ServerThread) -> Iterator[th.InferenceServerClient]:
    c = th.InferenceServerClient(f"127.0.0.1:{served.port}", concurrency=2)
    try:
        yield c
    finally:
        c.close()


def test_tritonclient_basics(triton: th.InferenceServerClient) -> None:
    assert triton.is_server_live()
    assert triton.is_server_ready()
    assert triton.is_model_ready("simple")
    assert not triton.is_model_ready("nope")
    assert triton.get_server_metadata()["name"] == "triton"
    assert triton.get_model_metadata("simple", query_params={"a": "1"})["versions"] == ["1"]
    assert triton.get_model_config("simple")["max_batch_size"] == 8
    assert {"name": "never_loaded"} in triton.get_model_repository_index()
    triton.load_model("x", config='{"max_batch_size": 2}')
    assert triton.get_model_config("x")["max_batch_size"] == 2
    triton.unload_model("x", unload_dependents=True)
    assert not triton.is_model_ready("x")


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
def test_tritonclient_infer(
    triton: th.InferenceServerClient, binary: bool, compression: str | None
) -> None:
    outputs = [th.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    result = triton.infer(
        "simple",
        _simple_inputs(binary),
        outputs=outputs,
        request_id="42",
        request_compression_algorithm=compression,
        response_compression_algorithm=compression,
    )
    assert result.get_response()["id"] == "42"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(1, 17).reshape(1, 16))
    assert result.as_numpy("OUTPUT1") is None


def test_tritonclient_every_datatype(triton: th.InferenceServerClient) -> None:
    rng = np.random.default_rng(0)
    inputs, expected = [], {}
    for d in ECHO_TYPES:
        if d.is_bytes:
            # NUL and multi-byte text survive; onnxruntime strings must be valid UTF-8
            array = np.array([b"x", b"\x00" + "é".encode(), b""], dtype=object)
        elif d.dtype.kind == "b":
            array = rng.integers(0, 2, 5).astype(bool)
        else:
            array = (rng.random(5) * 100).astype(d.dtype)
        infer_input = th.InferInput(f"IN_{d.name}", list(array.shape), d.name)
        infer_input.set_data_from_numpy(array, binary_data=True)
        inputs.append(infer_input)
        expected[f"OUT_{d.name}"] = array
    result = triton.infer("echo", inputs)
    for name, array in expected.items():
        got = result.as_numpy(name)
        assert got is not None, name
        assert got.tolist() == array.tolist(), name


def test_tritonclient_errors_keep_the_server_serving(
    triton: th.InferenceServerClient, served: _ServerThread
) -> None:
    with pytest.raises(InferenceServerException) as info:
        triton.get_model_metadata("nope")
    assert info.value.status() == "404"
    assert "Request for unknown model" in info.value.message()
    bad = th.InferInput("INPUT0", [1, 3], "INT32")
    bad.set_data_from_numpy(np.zeros((1, 3), np.int32))
    with pytest.raises(InferenceServerException) as info:
        triton.infer("simple", [bad])
    assert info.value.status() == "400"
    with pytest.raises(InferenceServerException) as info:
        triton.infer("failing", [_text_input("not a number")])
    assert info.value.status() == "400"
    assert "model 'failing' failed in onnxruntime" in info.value.message()
    big = th.InferInput("INPUT0", [1, LIMIT], "INT32")
    big.set_data_from_numpy(np.zeros((1, LIMIT), np.int32))
    with pytest.raises(InferenceServerException) as info:
        triton.infer("simple", [big])
    assert info.value.status() == "413"
    # the same pooled connections go on serving
    for _ in range(3):
        assert triton.infer("simple", _simple_inputs(True)).as_numpy("OUTPUT0") is not None


def _text_input(text: str) -> th.InferInput:
    x = th.InferInput("X", [1], "BYTES")
    x.set_data_from_numpy(np.array([text.encode()], dtype=object))
    return x


def test_raw_socket_keep_alive_and_nodelay(served: _ServerThread) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        for path in (b"/v2/health/live", b"/nowhere", b"/v2/health/ready"):
            sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            head = _read_response(sock)
            assert b"content-length:" in head.lower()
        # a refused oversized body does not spoil the connection
        body = b"x" * (LIMIT * 3)
        sock.sendall(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        assert _read_response(sock).startswith(b"HTTP/1.1 413")
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_response(sock).startswith(b"HTTP/1.1 200")

        async def nodelay_flags() -> list[int]:
            flags = []
            for conn in served.handle.connections:
                s = conn.transport.get_extra_info("socket")
                flags.append(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            return flags

        flags = served.call(nodelay_flags())
        assert flags
        assert all(flags)


def _read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, "connection closed"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        rest += sock.recv(4096)
    return head


async def test_aio_client_gets_gzip_infer_replies_and_plain_json_elsewhere(
    served: _ServerThread,
) -> None:
    aio = th_aio.InferenceServerClient(f"127.0.0.1:{served.port}")
    try:
        assert await aio.is_server_live()
        assert (await aio.get_model_metadata("simple"))["name"] == "simple"
        result = await aio.infer("simple", _simple_inputs(True))
        assert result.as_numpy("OUTPUT1").tolist()[0] == [i - 1 for i in range(16)]
    finally:
        await aio.close()
