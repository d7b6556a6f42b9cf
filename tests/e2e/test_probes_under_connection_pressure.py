"""Health probes of a real ``inferd serve`` answer while every connection slot is taken.

The server's HTTP connection limit is filled the ways a probe of the server filled it — idle
keep-alive connections, silent sockets that never send a byte, requests whose body never ends —
and a liveness, readiness and model readiness probe must still answer ``200`` on a fresh
connection, well before the idle (75 s) and header (10 s) timeouts could free a slot (the
client's timeout is 5 s). Inference on a fresh connection is served when an idle connection can
make room for it, and refused with ``503`` naming the limit when every slot is busy. The gRPC
port has no connection limit: its health service answers with many connections open.
"""

from __future__ import annotations

import http.client
import json
import resource
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import write_add_sub

pytestmark = pytest.mark.e2e

LIMIT = 64
PROBE_TIMEOUT_S = 5.0  # far below the idle timeout (75 s) and the header timeout (10 s)
READ_LIMIT_S = 30.0  # a bound against hanging for the connections that fill the slots
PROBES = ("/v2/health/live", "/v2/health/ready", "/v2/models/simple/ready")
EXPECTED = {
    "/v2/health/live": {"live": True},
    "/v2/health/ready": {"ready": True},
    "/v2/models/simple/ready": None,  # tritonclient reads only the status; the body is empty
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    write_add_sub(root, "simple")
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    args = ["--http-max-connections", str(LIMIT), "--http-body-timeout-secs", "300"]
    with running_server([repo], args) as proc:
        yield proc


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.rsplit(":", 1)
    return host, int(port)


def _probe(url: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """One probe on a fresh connection, as a kubelet sends it."""
    conn = http.client.HTTPConnection(*_host_port(url), timeout=PROBE_TIMEOUT_S)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
    finally:
        conn.close()


def _assert_probes_answer(url: str) -> None:
    for path in PROBES:
        status, _, body = _probe(url, path)
        assert status == 200, (path, status, body)
        if EXPECTED[path] is not None:
            assert json.loads(body) == EXPECTED[path]


def _inputs() -> tuple[list[httpclient.InferInput], np.ndarray]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    return inputs, a + 1


def _infer(url: str) -> None:
    """Inference on a fresh connection with the official client; raises its exception."""
    client = httpclient.InferenceServerClient(
        url, connection_timeout=PROBE_TIMEOUT_S, network_timeout=PROBE_TIMEOUT_S
    )
    try:
        inputs, expected = _inputs()
        result = client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)
    finally:
        client.close()


def _keep_alive(url: str, count: int, stack: ExitStack) -> list[http.client.HTTPConnection]:
    """``count`` connections that each had one request answered and are kept open, idle."""
    held = []
    for _ in range(count):
        conn = http.client.HTTPConnection(*_host_port(url), timeout=READ_LIMIT_S)
        stack.callback(conn.close)
        conn.request("GET", "/v2/health/ready")
        reply = conn.getresponse()
        assert reply.status == 200  # the slots were free: nothing else holds them
        reply.read()
        held.append(conn)
    return held


def _sockets(url: str, count: int, stack: ExitStack) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(_host_port(url), timeout=READ_LIMIT_S)
        stack.callback(sock.close)
        socks.append(sock)
    return socks


def _read_until(sock: socket.socket, end: bytes) -> bytes:
    data = b""
    while not data.endswith(end):
        chunk = sock.recv(1)
        assert chunk, "the server closed the connection"
        data += chunk
    return data


def _closed_by_server(sock: socket.socket) -> bool:
    """The server closed it without a word (EOF, no bytes); waits up to the read bound."""
    return sock.recv(1) == b""


def _still_served(conn: http.client.HTTPConnection) -> None:
    conn.request("GET", "/v2/health/live")
    reply = conn.getresponse()
    assert (reply.status, reply.read()) == (200, b'{"live":true}')


def test_idle_keep_alive_connections_make_room_for_probes_and_inference(
    server: ServerProcess,
) -> None:
    url = server.http_url
    with ExitStack() as stack:
        held = _keep_alive(url, LIMIT, stack)
        _assert_probes_answer(url)
        _infer(url)  # served: the longest-idle connection made room for it
        assert held[0].sock is not None
        assert _closed_by_server(held[0].sock)  # the longest idle went first
        _still_served(held[-1])  # the most recently used kept its slot
    _assert_probes_answer(url)
    _infer(url)


def test_silent_sockets_make_room_for_probes_and_inference(server: ServerProcess) -> None:
    url = server.http_url
    with ExitStack() as stack:
        silent = _sockets(url, LIMIT + LIMIT // 2, stack)  # more than the limit, like 1,100
        _assert_probes_answer(url)
        _infer(url)
        assert _closed_by_server(silent[0])  # the longest silent went first
    _infer(url)


def test_probes_answer_when_every_slot_is_busy_and_inference_gets_503(
    server: ServerProcess,
) -> None:
    url = server.http_url
    head = (
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    with ExitStack() as stack:
        busy = _sockets(url, LIMIT, stack)
        for sock in busy:  # a body that never comes keeps its slot busy (the body timeout)
            sock.sendall(head)
        for sock in busy:  # the server asks for the body: it has read the head
            assert _read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 100 ")
        for path in PROBES:
            status, headers, _ = _probe(url, path)
            assert status == 200, path
            assert headers["connection"] == "close"  # answered on a probe slot
        with pytest.raises(InferenceServerException) as caught:
            _infer(url)
        assert caught.value.status() == "503"
        message = str(caught.value)
        assert f"limit of {LIMIT} open HTTP connections" in message
        assert "--http-max-connections" in message
        assert "only health probes" in message
    # the busy sockets are closed: the server keeps serving once it has seen them go
    refusals = []
    for _ in range(200):
        try:
            _infer(url)
            break
        except InferenceServerException as exc:
            refusals.append(exc.status())
    else:
        pytest.fail("inference was still refused after the busy connections closed")
    assert set(refusals) <= {"503"}
    _assert_probes_answer(url)


def _raise_open_files(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"needs {needed} open files, the hard limit is {hard}")
    # the server started next inherits it
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def test_probes_answer_with_the_default_1024_slots_taken(repo: Path) -> None:
    _raise_open_files(4096)
    with running_server([repo]) as proc, ExitStack() as stack:
        url = proc.http_url
        held = _keep_alive(url, 1024, stack)
        _assert_probes_answer(url)
        assert held[0].sock is not None
        assert _closed_by_server(held[0].sock)
        silent = _sockets(url, 1100, stack)
        _assert_probes_answer(url)
        _infer(url)
        assert held[-1].sock is not None
        assert _closed_by_server(held[-1].sock)  # every idle one made room for the silent ones
        assert _closed_by_server(silent[0])  # then the longest silent


def test_grpc_health_answers_with_many_connections_open(server: ServerProcess) -> None:
    health = pytest.importorskip("grpc_health.v1.health_pb2")
    health_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")
    import grpc

    url = server.grpc_url
    count = 2 * LIMIT
    with ExitStack() as stack:
        for _ in range(count):  # each its own connection (no shared subchannel), then idle
            channel = grpc.insecure_channel(url, options=[("grpc.use_local_subchannel_pool", 1)])
            stack.callback(channel.close)
            stub = health_grpc.HealthStub(channel)
            reply = stub.Check(health.HealthCheckRequest(), timeout=READ_LIMIT_S)
            assert reply.status == health.HealthCheckResponse.SERVING
        _sockets(url, count, stack)  # and sockets that never send the HTTP/2 preface

        with grpc.insecure_channel(url) as channel:
            stub = health_grpc.HealthStub(channel)
            reply = stub.Check(health.HealthCheckRequest(), timeout=PROBE_TIMEOUT_S)
            assert reply.status == health.HealthCheckResponse.SERVING
        client = grpcclient.InferenceServerClient(url)
        try:
            assert client.is_server_ready(client_timeout=PROBE_TIMEOUT_S)
            assert client.is_server_live(client_timeout=PROBE_TIMEOUT_S)
            assert client.is_model_ready("simple", client_timeout=PROBE_TIMEOUT_S)
        finally:
            client.close()
