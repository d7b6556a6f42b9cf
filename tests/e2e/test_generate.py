"""The HTTP generate extension (``/generate``, ``/generate_stream``) against ``inferd serve``.

httpx is the client: one JSON object in, one JSON object or server-sent events out.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferd.examples.simple_models import build_simple
from inferd.examples.streaming_models import build_streaming
from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

TICKER_CONFIG = """
name: "ticker"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
parameters { key: "marker_dir" value: { string_value: "MARKER_DIR" } }
input [
  { name: "COUNT", data_type: TYPE_INT32, dims: [ 1 ] },
  { name: "FAIL_AT", data_type: TYPE_INT32, dims: [ 1 ] },
  { name: "DELAY_US", data_type: TYPE_UINT32, dims: [ 1 ] }
]
output [
  { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] },
  { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] }
]
"""

# COUNT responses (OUT = the index, TEXT = the request's parameters as JSON); at index FAIL_AT
# an error response instead, then the others. It writes <marker_dir>/<id>.started when it
# starts a request and, when it sees the request cancelled, <marker_dir>/<id> (the index)
TICKER_MODEL = """
import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.marker_dir = config["parameters"]["marker_dir"]["string_value"]

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.tick, args=(request,), daemon=True).start()
        return None

    def tick(self, request):
        sender = request.get_response_sender()
        get = lambda name: int(pb_utils.get_input_tensor_by_name(request, name).as_numpy()[0])
        count, fail_at, delay = get("COUNT"), get("FAIL_AT"), get("DELAY_US")
        params = request.parameters()
        with open(os.path.join(self.marker_dir, request.request_id() + ".started"), "w"):
            pass
        for index in range(count):
            deadline = time.monotonic() + delay / 1e6
            while time.monotonic() < deadline and not sender.is_cancelled():
                time.sleep(0.002)
            if sender.is_cancelled():
                with open(os.path.join(self.marker_dir, request.request_id()), "w") as f:
                    f.write(str(index))
                break
            if index == fail_at:
                error = pb_utils.TritonError(f"tick {index} failed")
                sender.send(pb_utils.InferenceResponse(error=error))
                continue
            out = pb_utils.Tensor("OUT", np.array([index], dtype=np.int32))
            text = pb_utils.Tensor("TEXT", np.array([params.encode()], dtype=object))
            sender.send(pb_utils.InferenceResponse([out, text]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


@pytest.fixture(scope="module")
def markers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("markers")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, markers: Path) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("generate") / "models"
    build_streaming("repeat_int32", repo / "repeat_int32")
    build_simple("simple", repo / "simple")
    ticker = repo / "ticker"
    (ticker / "1").mkdir(parents=True)
    (ticker / "config.pbtxt").write_text(TICKER_CONFIG.replace("MARKER_DIR", str(markers)))
    (ticker / "1" / "model.py").write_text(TICKER_MODEL)
    with running_server([repo]) as proc:
        yield proc


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as http:
        yield http


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON of every ``data:`` event of a server-sent event stream."""
    events = []
    for block in response.text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            events.append(json.loads(block.removeprefix("data: ")))
    return events


def _ticker(count: int, fail_at: int = -1, delay_us: int = 0, **extra: Any) -> dict[str, Any]:
    return {"COUNT": count, "FAIL_AT": fail_at, "DELAY_US": delay_us, **extra}


# -- generate -----------------------------------------------------------------------------------


def test_generate_on_an_ordinary_model(client: httpx.Client) -> None:
    body = {"id": "7", "INPUT0": list(range(16)), "INPUT1": [1] * 16}
    reply = client.post("/v2/models/simple/generate", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == {
        "id": "7",
        "model_name": "simple",
        "model_version": "1",
        "OUTPUT0": list(range(1, 17)),
        "OUTPUT1": list(range(-1, 15)),
    }
    versioned = client.post("/v2/models/simple/versions/1/generate", json=body)
    assert versioned.json()["OUTPUT0"] == list(range(1, 17))


def test_generate_on_a_decoupled_model_with_one_response(client: httpx.Client) -> None:
    reply = client.post("/v2/models/repeat_int32/generate", json={"IN": 4, "DELAY": 0, "WAIT": 0})
    assert reply.status_code == 200, reply.text
    # one-element outputs are scalars; parameters reach the model
    assert reply.json() == {"model_name": "repeat_int32", "model_version": "1", "OUT": 4, "IDX": 0}
    ticked = client.post(
        "/v2/models/ticker/generate",
        json=_ticker(1, top="x", parameters={"temperature": 0.5, "greedy": True}),
    )
    assert json.loads(ticked.json()["TEXT"]) == {"top": "x", "temperature": 0.5, "greedy": True}


@pytest.mark.parametrize("count", [0, 3])
def test_generate_needs_exactly_one_response(client: httpx.Client, count: int) -> None:
    reply = client.post("/v2/models/ticker/generate", json=_ticker(count))
    assert reply.status_code == 400
    assert "exactly 1 response" in reply.json()["error"]
    assert "generate_stream" in reply.json()["error"]


def test_generate_answers_the_models_error(client: httpx.Client) -> None:
    reply = client.post("/v2/models/ticker/generate", json=_ticker(1, fail_at=0))
    assert reply.status_code == 500
    assert reply.json() == {"error": "tick 0 failed"}


# -- generate_stream ----------------------------------------------------------------------------


def test_generate_stream_sends_every_response(client: httpx.Client) -> None:
    body = {"id": "s1", "IN": [7, 8, 9], "DELAY": [1000, 1000, 1000], "WAIT": 0}
    reply = client.post("/v2/models/repeat_int32/generate_stream", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert _events(reply) == [
        {"id": "s1", "model_name": "repeat_int32", "model_version": "1", "OUT": v, "IDX": i}
        for i, v in enumerate([7, 8, 9])
    ]


def test_generate_stream_with_zero_responses(client: httpx.Client) -> None:
    reply = client.post("/v2/models/ticker/generate_stream", json=_ticker(0))
    assert reply.status_code == 200
    assert reply.text == ""


def test_generate_stream_on_an_ordinary_model(client: httpx.Client) -> None:
    body = {"INPUT0": list(range(16)), "INPUT1": [2] * 16}
    reply = client.post("/v2/models/simple/generate_stream", json=body)
    assert [e["OUTPUT0"] for e in _events(reply)] == [list(range(2, 18))]


def test_an_error_mid_stream_is_an_event_and_ends_the_stream(client: httpx.Client) -> None:
    reply = client.post("/v2/models/ticker/generate_stream", json=_ticker(5, fail_at=2))
    assert reply.status_code == 200
    events = _events(reply)
    assert [e.get("OUT") for e in events[:2]] == [0, 1]
    assert events[2:] == [{"error": "tick 2 failed"}]


def test_a_first_response_that_is_an_error_sets_the_status(client: httpx.Client) -> None:
    body = {"IN": [1, 2], "DELAY": [0], "WAIT": 0}
    reply = client.post("/v2/models/repeat_int32/generate_stream", json=body)
    assert reply.status_code == 400
    assert _events(reply) == [{"error": "DELAY has 1 elements but IN has 2"}]


# -- errors before the model runs ---------------------------------------------------------------


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "malformed JSON"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (b'{"IN": [1], "DELAY": [0], "WAIT": 0, "EXTRA": [1, 2]}', 400, "'EXTRA' of the generate"),
        (b'{"IN": ["a"], "DELAY": [0], "WAIT": 0}', 400, "INT32 input 'IN' must be JSON integer"),
        (b'{"IN": [[1]], "DELAY": [0], "WAIT": 0}', 400, "flat JSON array"),
        (b'{"IN": [1], "DELAY": [0], "WAIT": [1, 2]}', 400, "input 'WAIT' to its shape [1]"),
        (b'{"IN": [1], "DELAY": [0]}', 400, "WAIT"),
        (b'{"IN": [1], "DELAY": [0], "WAIT": 0, "parameters": 3}', 400, "'parameters' of a"),
        (b'{"IN": [1], "DELAY": [0], "WAIT": 0, "triton_x": 1}', 400, "reserved"),
        (b'{"id": 5, "IN": [1], "DELAY": [0], "WAIT": 0}', 400, "'id' of a generate request"),
        (b'{"IN": 1, "DELAY": [0], "WAIT": 0, "parameters": {"IN": 2}}', 400, "more than once"),
        # a key twice in one object: refused, not one of them kept silently
        (b'{"IN": [1], "IN": [2], "DELAY": [0], "WAIT": 0}', 400, "input 'IN' already exists in"),
        (b'{"IN": [1], "DELAY": [0], "WAIT": 0, "p": 1, "p": 2}', 400, "key 'p' appears more"),
        (
            b'{"IN": [1], "DELAY": [0], "WAIT": 0, "parameters": {"t": 1, "t": 1}}',
            400,
            "key 't' appears more than once in the generate request",
        ),
    ],
)
def test_bad_requests_are_precise_400s(
    client: httpx.Client, route: str, body: bytes, status: int, message: str
) -> None:
    reply = client.post(f"/v2/models/repeat_int32/{route}", content=body)
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert message in reply.json()["error"]


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_unknown_model_and_wrong_method(client: httpx.Client, route: str) -> None:
    reply = client.post(f"/v2/models/nope/{route}", json={})
    assert reply.status_code == 404
    assert "nope" in reply.json()["error"]
    assert client.get(f"/v2/models/simple/{route}").status_code == 405


def test_server_metadata_lists_generate(client: httpx.Client) -> None:
    assert "generate" in client.get("/v2").json()["extensions"]


# -- cancellation -------------------------------------------------------------------------------


def _wait_for(path: Path, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared: no cancellation"
        time.sleep(0.05)
    return path.read_text()


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_a_client_that_disconnects_cancels_the_request(
    server: ServerProcess, markers: Path, route: str
) -> None:
    request_id = f"gone-{route}"
    streaming = route == "generate_stream"
    count, delay_us = (2000, 10_000) if streaming else (1, 60_000_000)
    body = json.dumps({"id": request_id, **_ticker(count, delay_us=delay_us)}).encode()
    host, port = server.http_url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"POST /v2/models/ticker/{route} HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        if streaming:
            assert b"data: " in sock.recv(65536)  # the first event arrived
        else:
            _wait_for(markers / f"{request_id}.started")  # the model is running it
    ticks = int(_wait_for(markers / request_id))  # the model saw the cancellation and stopped
    assert 0 < ticks < count if streaming else ticks == 0


# -- the edge's access control and limits apply --------------------------------------------------


def test_restricted_inference_and_body_limits_cover_generate(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    repo = tmp_path_factory.mktemp("guarded") / "models"
    build_simple("simple", repo / "simple")
    args = [
        "--http-restricted-api",
        "inference:infer-key=s3cret",
        "--http-max-json-input-size",
        "4096",
    ]
    body = {"INPUT0": list(range(16)), "INPUT1": [1] * 16}
    with (
        running_server([repo], args) as proc,
        httpx.Client(base_url=f"http://{proc.http_url}", timeout=30) as http,
    ):
        for route in ("generate", "generate_stream"):
            refused = http.post(f"/v2/models/simple/{route}", json=body)
            assert refused.status_code == 403
            assert "expecting header 'infer-key'" in refused.json()["error"]
            good = {"infer-key": "s3cret"}
            ok = http.post(f"/v2/models/simple/{route}", json=body, headers=good)
            assert ok.status_code == 200, ok.text
            big = http.post(f"/v2/models/simple/{route}", content=b" " * 5000 + b"{}", headers=good)
            assert big.status_code == 413
            assert "--http-max-json-input-size" in big.json()["error"]
