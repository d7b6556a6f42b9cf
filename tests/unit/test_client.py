"""``inferd.client``: the one endpoint type, ``HOST:PORT`` rules and the admin client's error
mapping where no server is needed (a server that does not answer); the calls against a real
server are in tests/e2e/test_admin_client.py."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferd.client import AdminClient, Endpoint, HttpsSettings, format_host, split_url
from inferd.errors import (
    AccessDeniedError,
    ErrorCode,
    InvalidArgumentError,
    PermissionDeniedError,
    RepositoryCallError,
    ServerPermissionDeniedError,
    ServerUnauthenticatedError,
    ServerUnreachableError,
    UnauthenticatedError,
    UnavailableError,
)


@pytest.mark.parametrize(
    ("host", "port", "shown"),
    [
        ("localhost", 8000, "localhost:8000"),
        ("127.0.0.1", 1, "127.0.0.1:1"),
        ("::1", 8001, "[::1]:8001"),
        ("fe80::1%eth0", 80, "[fe80::1%eth0]:80"),
        ("::1", None, "[::1]"),
        ("example.org", None, "example.org"),
    ],
)
def test_format_host_brackets_ipv6(host: str, port: int | None, shown: str) -> None:
    assert format_host(host, port) == shown


@pytest.mark.parametrize("url", ["[::1]:8123", "http://[::1]:8123", "https://[::1]:8123/"])
def test_split_url_and_format_host_round_trip(url: str) -> None:
    host, port = split_url(url, 8000)
    assert (host, port) == ("::1", 8123)
    assert format_host(host, port) == "[::1]:8123"


def test_an_endpoint_from_a_url() -> None:
    plain = Endpoint.from_url("[::1]:9000", headers=(("x-key", "v"),), token="t")
    assert plain.base_url == "http://[::1]:9000"
    assert plain.all_headers() == (("x-key", "v"), ("Authorization", "Bearer t"))
    assert Endpoint.from_url("h").all_headers() == ()
    secure = Endpoint.from_url("https://h:1")
    assert secure.tls == HttpsSettings()
    assert secure.base_url == "https://h:1"
    given = HttpsSettings(verify_peer=False)
    assert Endpoint.from_url("https://h:1", tls=given).tls is given


def test_a_token_and_an_authorization_header_are_refused_together() -> None:
    with pytest.raises(InvalidArgumentError, match="-H Authorization and the admin token"):
        Endpoint.from_url("h:1", headers=(("authorization", "Basic x"),), token="t")


def test_the_refusals_join_the_error_tree() -> None:
    assert issubclass(ServerUnreachableError, UnavailableError)
    assert ServerUnreachableError.code is ErrorCode.UNAVAILABLE
    assert issubclass(ServerUnauthenticatedError, UnauthenticatedError)
    assert issubclass(ServerUnauthenticatedError, AccessDeniedError)
    assert ServerUnauthenticatedError.code is ErrorCode.UNAUTHENTICATED
    assert issubclass(ServerPermissionDeniedError, PermissionDeniedError)
    assert issubclass(ServerPermissionDeniedError, AccessDeniedError)
    assert ServerPermissionDeniedError.code is ErrorCode.PERMISSION_DENIED


def test_the_old_names_still_import() -> None:
    from inferd.tools.analyze.control import AccessDeniedError as Old
    from inferd.tools.analyze.control import LoadFailedError
    from inferd.tools.analyze.control import ServerUnreachableError as Gone
    from inferd.tools.perf.transport import PerfAccessError, PerfRequestError

    assert Old is AccessDeniedError
    assert Gone is ServerUnreachableError
    assert LoadFailedError.__module__ == RepositoryCallError.__module__ == "inferd.errors"
    assert issubclass(PerfAccessError, PerfRequestError)


def test_a_server_that_does_not_answer_is_named() -> None:
    with socket.socket() as held:  # bound, never listening: a connection is refused
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        client = AdminClient(Endpoint("127.0.0.1", port), timeout_s=10.0)
        with pytest.raises(ServerUnreachableError) as caught:
            client.index()
    assert caught.value.message.startswith(f"http://127.0.0.1:{port} did not answer: ")
    assert caught.value.code is ErrorCode.UNAVAILABLE


def test_a_missing_ca_file_is_refused_before_any_call(tmp_path: Path) -> None:
    tls = HttpsSettings(ca_file=tmp_path / "absent.pem")
    with pytest.raises(InvalidArgumentError, match="--ssl-https-ca-certificates-file"):
        AdminClient(Endpoint("127.0.0.1", 1, tls))


class _Refusing(http.server.BaseHTTPRequestHandler):
    """401 to a call without a bearer token; otherwise the request's path and headers as JSON."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Authorization") is None:
            body, status = json.dumps({"error": "no token"}).encode(), 401
        else:
            body, status = json.dumps({"path": self.path, **self.headers}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_an_admin_client_from_a_url_sends_its_headers_and_token(refusing_server: int) -> None:
    client = AdminClient.from_url(
        f"http://127.0.0.1:{refusing_server}", headers=(("X-Key", "v"),), admin_token="t"
    )
    assert client.endpoint == Endpoint("127.0.0.1", refusing_server, None, (("X-Key", "v"),), "t")
    answer = client.call("POST", "/v2/repository/index", {}, timeout_s=10.0)
    assert answer["path"] == "/v2/repository/index"
    assert answer["Authorization"] == "Bearer t"
    assert answer["X-Key"] == "v"
    assert json.loads(client.call_raw("POST", "/x", {}))["path"] == "/x"
    with pytest.raises(InvalidArgumentError, match="-H Authorization and the admin token"):
        AdminClient.from_url("h:1", headers=(("Authorization", "x"),), admin_token="t")


def test_a_call_words_a_refusal_with_its_subject_and_hint(refusing_server: int) -> None:
    client = AdminClient.from_url(f"127.0.0.1:{refusing_server}")
    with pytest.raises(ServerUnauthenticatedError) as caught:
        client.call("POST", "/v2/models/m/rollout", {}, subject="the rollout call", token_hint="H")
    assert caught.value.message == "the server refused the rollout call (HTTP 401: no token): H"
    with pytest.raises(ServerUnauthenticatedError, match="refused model control"):
        client.call_raw("POST", "/v2/repository/index", {})
    assert issubclass(ServerUnauthenticatedError, AccessDeniedError)
    assert not issubclass(ServerUnauthenticatedError, RepositoryCallError)
