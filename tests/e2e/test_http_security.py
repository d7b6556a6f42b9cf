"""The HTTP edge of a real ``inferd serve``: restricted APIs, the admin token, health bodies,
model names, TLS and mutual TLS, the header timeout and the connection limit.

Clients are the official ``tritonclient.http`` (with ``headers=`` and ``ssl_options=``) and raw
sockets where the test must control every byte. Certificates are made here with ``openssl``.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import raw_request
from tests.helpers.models import write_add_sub

pytestmark = pytest.mark.e2e

SECRET = "s3cret-value"
TOKEN = "admin-token-for-tests"
READ_LIMIT_S = 20.0  # a bound against hanging, far above every timeout under test


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    write_add_sub(root, "simple")
    write_add_sub(root, "spare")  # loaded and unloaded by the tests
    return root


def _infer_simple(client: httpclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


# -- restricted APIs --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def restricted(repo: Path) -> Iterator[ServerProcess]:
    args = [
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
        "--http-restricted-api",
        f"model-repository:admin-key={SECRET}",
    ]
    with running_server([repo], args) as proc:
        yield proc


@pytest.fixture
def client(restricted: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(restricted.http_url)
    try:
        yield c
    finally:
        c.close()


def test_restricted_api_needs_its_header(client: httpclient.InferenceServerClient) -> None:
    for call in (
        lambda **kw: client.load_model("spare", **kw),
        lambda **kw: client.unload_model("spare", **kw),
        lambda **kw: client.get_model_repository_index(**kw),
    ):
        with pytest.raises(InferenceServerException) as caught:
            call()
        assert caught.value.status() == "403"
        assert "This API is restricted, expecting header 'admin-key'" in str(caught.value)
        with pytest.raises(InferenceServerException) as caught:
            call(headers={"admin-key": "wrong"})
        assert caught.value.status() == "403"

    good = {"admin-key": SECRET}
    client.load_model("spare", headers=good)
    assert client.is_model_ready("spare")
    assert {"name": "spare", "version": "1", "state": "READY"} in (
        client.get_model_repository_index(headers=good)
    )
    client.unload_model("spare", headers=good)
    assert not client.is_model_ready("spare")


def test_unrestricted_apis_are_unaffected(client: httpclient.InferenceServerClient) -> None:
    _infer_simple(client)
    assert client.is_server_live()
    assert client.get_model_metadata("simple")["name"] == "simple"
    assert client.get_model_config("simple")["name"] == "simple"
    assert client.get_inference_statistics("simple")["model_stats"]


def test_restriction_is_checked_before_the_method(restricted: ServerProcess) -> None:
    reply = raw_request(restricted.http_url, "GET", "/v2/repository/index")
    assert reply.status == 403  # as Triton: the restriction first, then 405


# -- health bodies and model names ------------------------------------------------------------


def test_health_endpoints_answer_with_a_body(
    restricted: ServerProcess, client: httpclient.InferenceServerClient
) -> None:
    live = raw_request(restricted.http_url, "GET", "/v2/health/live")
    assert (live.status, live.json()) == (200, {"live": True})
    assert live.headers["content-type"] == "application/json"
    ready = raw_request(restricted.http_url, "GET", "/v2/health/ready")
    assert (ready.status, ready.json()) == (200, {"ready": True})
    assert client.is_server_live()
    assert client.is_server_ready()


@pytest.mark.parametrize(
    ("method", "path", "why"),
    [
        ("GET", "/v2/models/a%2Fb", "must not contain '/'"),
        ("GET", "/v2/models/%2E%2E/ready", "must not be '.' or '..'"),
        ("GET", "/v2/models/a%00b/config", "control characters"),
        ("GET", "/v2/models/%20simple/stats", "whitespace"),
        ("POST", "/v2/models/%FF/infer", "not valid UTF-8"),
        ("POST", "/v2/models/" + "m" * 300 + "/versions/1/infer", "at most 255"),
        ("POST", "/v2/repository/models/%2E%2E/unload", "must not be '.' or '..'"),
    ],
)
def test_bad_model_names_get_400_naming_the_problem(
    restricted: ServerProcess, method: str, path: str, why: str
) -> None:
    headers = {"admin-key": SECRET}
    reply = raw_request(restricted.http_url, method, path, b"{}", headers)
    assert reply.status == 400
    assert "invalid model name" in reply.error
    assert why in reply.error
    assert raw_request(restricted.http_url, "GET", "/v2/health/live").status == 200


# -- admin token ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def token_server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    token_file = tmp_path_factory.mktemp("token") / "admin-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    args = ["--model-control-mode", "explicit", "--admin-token-file", str(token_file)]
    with running_server([repo], args) as proc:
        yield proc


def test_admin_token_guards_the_model_repository_api(token_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(token_server.http_url)
    try:
        for call in (
            lambda **kw: client.load_model("spare", **kw),
            lambda **kw: client.unload_model("spare", **kw),
            lambda **kw: client.get_model_repository_index(**kw),
        ):
            for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                with pytest.raises(InferenceServerException) as caught:
                    call(headers=headers)
                assert caught.value.status() == "401"
                assert "Authorization: Bearer" in str(caught.value)
        good = {"Authorization": f"Bearer {TOKEN}"}
        client.load_model("spare", headers=good)
        assert client.is_model_ready("spare")
        assert client.get_model_repository_index(headers=good)
        client.unload_model("spare", headers=good)
        assert not client.is_model_ready("spare")
        assert client.is_server_ready()  # health needs no token
    finally:
        client.close()


# -- TLS --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True)


def _issue(name: str, usage: str, san: str, cwd: Path) -> None:
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key", cwd=cwd)
    _openssl(
        "req", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-out", f"{name}.csr", cwd=cwd
    )  # fmt: skip
    (cwd / f"{name}.ext").write_text(
        f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        f"extendedKeyUsage={usage}\nsubjectKeyIdentifier=hash\n"
        f"authorityKeyIdentifier=keyid\n{san}"
    )
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-sha256", "-extfile", f"{name}.ext",
        "-out", f"{name}.pem", cwd=cwd,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    d = tmp_path_factory.mktemp("pki")
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key", cwd=d)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=inferd test CA", "-days", "2",
        "-sha256", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "ca.pem", cwd=d,
    )  # fmt: skip
    _issue("server", "serverAuth", "subjectAltName=IP:127.0.0.1,DNS:localhost\n", d)
    _issue("client", "clientAuth", "", d)
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")


@pytest.fixture(scope="module")
def tls_server(repo: Path, pki: Pki) -> Iterator[ServerProcess]:
    args = [
        "--load-model", "simple", "--model-control-mode", "explicit", "--http-use-ssl",
        "--http-server-cert", str(pki.server_cert), "--http-server-key", str(pki.server_key),
    ]  # fmt: skip
    with running_server([repo], args) as proc:
        yield proc


@pytest.fixture(scope="module")
def mtls_server(repo: Path, pki: Pki) -> Iterator[ServerProcess]:
    args = [
        "--load-model", "simple", "--model-control-mode", "explicit", "--http-use-ssl-mutual",
        "--http-server-cert", str(pki.server_cert), "--http-server-key", str(pki.server_key),
        "--http-root-cert", str(pki.ca),
    ]  # fmt: skip
    with running_server([repo], args) as proc:
        yield proc


def _tls_client(url: str, options: dict[str, str]) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(url, ssl=True, ssl_options=options)


def test_tls_serves_tritonclient(tls_server: ServerProcess, pki: Pki) -> None:
    client = _tls_client(tls_server.http_url, {"ca_certs": str(pki.ca)})
    try:
        assert client.is_server_live()
        _infer_simple(client)
    finally:
        client.close()


def test_plain_http_to_the_tls_port_fails(tls_server: ServerProcess) -> None:
    with pytest.raises((http.client.HTTPException, OSError)):
        raw_request(tls_server.http_url, "GET", "/v2/health/live")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    host, port = tls_server.http_url.split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=30)
    try:  # the server survived the plain-text attempt
        conn.request("GET", "/v2/health/ready")
        assert json.loads(conn.getresponse().read()) == {"ready": True}
    finally:
        conn.close()


def test_mutual_tls_accepts_a_client_certificate(mtls_server: ServerProcess, pki: Pki) -> None:
    options = {
        "ca_certs": str(pki.ca),
        "certfile": str(pki.client_cert),
        "keyfile": str(pki.client_key),
    }
    client = _tls_client(mtls_server.http_url, options)
    try:
        assert client.is_server_ready()
        _infer_simple(client)
    finally:
        client.close()


def test_mutual_tls_refuses_a_client_without_certificate(
    mtls_server: ServerProcess, pki: Pki
) -> None:
    client = _tls_client(mtls_server.http_url, {"ca_certs": str(pki.ca)})
    try:
        # the handshake or the first read fails, as the TLS version decides
        with pytest.raises((InferenceServerException, http.client.HTTPException, OSError)):
            client.is_server_live()
    finally:
        client.close()


# -- header timeout and connection limit ------------------------------------------------------


@pytest.fixture(scope="module")
def limited(repo: Path) -> Iterator[ServerProcess]:
    args = ["--http-max-connections", "2", "--http-header-timeout-secs", "0.5"]
    with running_server([repo], args) as proc:
        yield proc


def _connect(url: str) -> socket.socket:
    host, port = url.split(":")
    return socket.create_connection((host, int(port)), timeout=READ_LIMIT_S)


def _read_to_eof(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _status_and_error(reply: bytes) -> tuple[int, str]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), str(json.loads(body)["error"])


def test_half_a_request_head_is_cut_off_after_the_header_timeout(limited: ServerProcess) -> None:
    with _connect(limited.http_url) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nUser-Ag")
        status, error = _status_and_error(_read_to_eof(sock))
    assert status == 408
    assert "--http-header-timeout-secs" in error
    assert raw_request(limited.http_url, "GET", "/v2/health/live").status == 200


def _admitted(url: str) -> http.client.HTTPConnection:
    """A kept-alive connection the server admitted. Connections closed by earlier tests may
    still count for a moment (the server sees a close when its loop next runs): retry."""
    host, port = url.split(":")
    for _ in range(200):
        conn = http.client.HTTPConnection(host, int(port), timeout=READ_LIMIT_S)
        conn.request("GET", "/v2/health/ready")
        response = conn.getresponse()
        if response.status == 200:
            assert response.read() == b'{"ready":true}'
            return conn
        assert response.status == 503
        conn.close()
    raise AssertionError("the server kept refusing connections")


def _busy_infer(url: str) -> tuple[socket.socket, bytes]:
    """A connection busy with an inference request whose body has not been sent yet (the
    server has read its head: it asked for the body); the body to send is returned."""
    body = json.dumps(
        {
            "inputs": [
                {"name": n, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
                for n in ("INPUT0", "INPUT1")
            ]
        }
    ).encode()
    sock = _connect(url)
    sock.sendall(
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    interim = b""
    while not interim.endswith(b"\r\n\r\n"):
        interim += sock.recv(1)
    assert interim.startswith(b"HTTP/1.1 100 ")
    return sock, body


def test_connection_beyond_the_limit_gets_503(limited: ServerProcess) -> None:
    """Beyond busy slots only health probes are answered (idle slots make room instead:
    test_probes_under_connection_pressure.py)."""
    held = [_admitted(limited.http_url), _admitted(limited.http_url)]
    busy = []
    try:
        busy = [_busy_infer(limited.http_url) for _ in range(2)]  # the held ones made room
        with _connect(limited.http_url) as sock:
            sock.sendall(b"GET /v2/models/simple HTTP/1.1\r\nHost: x\r\n\r\n")
            status, error = _status_and_error(_read_to_eof(sock))
        assert status == 503
        assert "limit of 2 open HTTP connections" in error
        assert "only health probes" in error
        assert raw_request(limited.http_url, "GET", "/v2/health/ready").status == 200
        for sock, body in busy:  # still served
            sock.sendall(body)
            reply = _read_to_eof(sock)
            assert reply.startswith(b"HTTP/1.1 200 "), reply
    finally:
        for conn in held:
            conn.close()
        for sock, _ in busy:
            sock.close()
