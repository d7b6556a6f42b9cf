"""HTTP body limits over the real stack (in process, through the ASGI interface).

JSON (an all-JSON inference body, the JSON header of a binary request, repository bodies) has its
own, lower limit than whole bodies; binary tensors may use the whole-body limit; model load
bodies may pass the JSON limit only with their bulk in base64 files.
"""

from __future__ import annotations

import base64
import gzip
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest
import pytest_asyncio
import tritonclient.http as th

from inferd.frontends.http.app import HttpApp
from tests.helpers.models import add_sub_model
from tests.integration.conftest import Stack, start_stack

LIMIT = 64 * 1024
JSON_LIMIT = 2 * 1024
FLAG = "--http-max-json-input-size"
INFER = "/v2/models/simple/infer"
in_process = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(serving_roots: list[Path]) -> AsyncIterator[Stack]:
    built = await start_stack(serving_roots, server_version="0.1.0")
    try:
        yield built
    finally:
        await built.manager.close()


@pytest_asyncio.fixture(loop_scope="module")
async def client(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    app = HttpApp(
        stack.engine,
        max_body_bytes=LIMIT,
        max_json_body_bytes=JSON_LIMIT,
        log=logging.getLogger("test.http.limits"),
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


def _simple_json(pad_to: int = 0, values: list[float] | None = None) -> bytes:
    data = values if values is not None else list(range(16))
    body = orjson.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": data},
                {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
            ]
        }
    )
    return body + b" " * max(0, pad_to - len(body))  # whitespace: still valid JSON


def _assert_json_413(reply: httpx.Response, *words: str) -> None:
    assert reply.status_code == 413, reply.text
    message = reply.json()["error"]
    assert str(JSON_LIMIT) in message
    assert FLAG in message
    assert "binary" in message
    for word in words:
        assert word in message


@in_process
async def test_json_inference_bodies_have_their_own_limit(client: httpx.AsyncClient) -> None:
    r = await client.post(INFER, content=_simple_json(pad_to=JSON_LIMIT))
    assert r.status_code == 200
    assert r.json()["outputs"][0]["data"] == list(range(1, 17))
    # one byte more: refused by its declared length, and as a chunked body by what arrived
    _assert_json_413(await client.post(INFER, content=_simple_json(pad_to=JSON_LIMIT + 1)))

    async def chunks() -> AsyncIterator[bytes]:
        body = _simple_json(pad_to=JSON_LIMIT + 1)
        yield body[:100]
        yield body[100:]

    _assert_json_413(await client.post(INFER, content=chunks()), "JSON inference request body")
    # small on the wire, too large once inflated
    bomb = gzip.compress(_simple_json(pad_to=JSON_LIMIT + 1))
    assert len(bomb) < JSON_LIMIT
    _assert_json_413(await client.post(INFER, content=bomb, headers={"Content-Encoding": "gzip"}))
    small = gzip.compress(_simple_json())
    r = await client.post(INFER, content=small, headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200


@in_process
async def test_binary_tensors_may_use_the_whole_body_limit(client: httpx.AsyncClient) -> None:
    text = th.InferInput("INPUT0", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"x" * (4 * JSON_LIMIT)]], dtype=object))
    body, header_length = th.InferenceServerClient.generate_request_body([text])
    assert header_length < JSON_LIMIT < len(body) < LIMIT
    r = await client.post(
        "/v2/models/identity/infer",
        content=body,
        headers={"Inference-Header-Content-Length": str(header_length)},
    )
    assert r.status_code == 200, r.text
    # the JSON header of a binary request is JSON: its limit applies, before the body is read
    header = orjson.loads(body[:header_length])
    header["id"] = "x" * JSON_LIMIT
    big_header = orjson.dumps(header)
    r = await client.post(
        "/v2/models/identity/infer",
        content=big_header + body[header_length:],
        headers={"Inference-Header-Content-Length": str(len(big_header))},
    )
    _assert_json_413(r, f"Inference-Header-Content-Length: {len(big_header)}")


@in_process
async def test_integer_inputs_take_whole_number_floats(client: httpx.AsyncClient) -> None:
    r = await client.post(INFER, content=_simple_json(values=[float(i) for i in range(16)]))
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == list(range(1, 17))
    r = await client.post(INFER, content=_simple_json(values=[0.5] * 16))
    assert r.status_code == 400
    assert "input 'INPUT0'" in r.json()["error"]
    assert "0.5" in r.json()["error"]
    r = await client.post(INFER, content=_simple_json(values=[2.0**31] + [0] * 15))
    assert r.status_code == 400
    assert "does not fit datatype INT32" in r.json()["error"]


@in_process
async def test_repository_bodies_follow_the_json_limit(client: httpx.AsyncClient) -> None:
    padded = b'{"ready": true}' + b" " * JSON_LIMIT
    r = await client.post("/v2/repository/index", content=padded)
    _assert_json_413(r, "repository index request")
    padded = b'{"parameters": {}}' + b" " * JSON_LIMIT
    r = await client.post("/v2/repository/models/x/unload", content=padded)
    _assert_json_413(r, "model unload request")


@in_process
async def test_large_load_bodies_must_hold_base64_files(client: httpx.AsyncClient) -> None:
    # a config of many small JSON values: above the JSON limit, and not file contents
    values = {"parameters": {"config": "{}", "x": list(range(JSON_LIMIT))}}
    r = await client.post("/v2/repository/models/x/load", content=orjson.dumps(values))
    assert r.status_code == 413
    message = r.json()["error"]
    assert FLAG in message
    assert "base64" in message
    # model files as base64 strings may take the body up to the whole-body limit
    model = add_sub_model(offset=7)
    params = {
        "config": '{"max_batch_size": "4"}',
        "file:1/model.onnx": base64.b64encode(model).decode(),
        "file:1/padding.bin": base64.b64encode(bytes(4 * JSON_LIMIT)).decode(),
    }
    body = orjson.dumps({"parameters": params})
    assert JSON_LIMIT < len(body) < LIMIT
    r = await client.post("/v2/repository/models/uploaded/load", content=body)
    assert r.status_code == 200, r.text
    r = await client.post(
        "/v2/models/uploaded/infer",
        content=_simple_json().replace(b"simple", b"uploaded"),
    )
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [i + 1 + 7 for i in range(16)]


@in_process
async def test_large_replies_are_compressed_off_the_event_loop(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    import struct
    import threading

    import inferd.frontends.http.app as app_module

    threads: list[threading.Thread] = []
    real = app_module.compress_response

    def spy(body: bytes, coding: str) -> bytes:
        threads.append(threading.current_thread())
        return real(body, coding)

    monkeypatch.setattr(app_module, "compress_response", spy)
    app = HttpApp(stack.engine, max_body_bytes=4 << 20, log=logging.getLogger("test.http"))
    text = bytes(range(32, 127)) * 5600  # 520 KB: far above the inline threshold
    element = struct.pack("<I", len(text)) + text
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [1, 1],
                    "parameters": {"binary_data_size": len(element)},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        reply = await c.post(
            "/v2/models/identity/infer",
            content=header + element,
            headers={
                "Inference-Header-Content-Length": str(len(header)),
                "Accept-Encoding": "deflate",
            },
        )
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-encoding"] == "deflate"
    assert reply.content.endswith(element)  # httpx inflated it
    assert threads
    assert threading.main_thread() not in threads
