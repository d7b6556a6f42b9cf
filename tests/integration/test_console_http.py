"""The web console's HTTP side, without a browser, on a real ``inferd serve``: the headers of
every answer, the shipped assets, path tricks, the event stream's format and figures, the
summary's access rules, the ``console`` API group and the cross-site refusal of state-changing
calls.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.errors import InvalidArgumentError
from inferd.frontends.access import parse_restriction
from inferd.frontends.console.app import CSP
from inferd.server.config import ServerConfig
from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import RawReply, raw_request
from tests.helpers.models import write_add_sub

TOKEN = "console-http-token"
READ_LIMIT_S = 20.0  # a bound against hanging, far above the stream's one-second interval
ASSETS = Path(__file__).parents[2] / "src" / "inferd" / "frontends" / "console" / "assets"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("console-http")
    write_add_sub(root, "simple")
    write_add_sub(root, "spare")  # in the repository, never loaded
    return root


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN)
    args = ["--model-control-mode", "explicit", "--load-model", "simple"]
    with running_server([repo], [*args, "--admin-token-file", str(token_file)]) as proc:
        yield proc


def get(server: ServerProcess, path: str, **headers: str) -> RawReply:
    return raw_request(server.http_url, "GET", path, headers=headers)


def test_the_page_and_its_assets_carry_strict_headers(server: ServerProcess) -> None:
    for path, kind in [
        ("/console", "text/html"),
        ("/console/", "text/html"),
        ("/console/assets/console.js", "text/javascript"),
        ("/console/assets/console.css", "text/css"),
        ("/console/api/summary", "application/json"),
    ]:
        reply = get(server, path)
        assert reply.status == 200, path
        assert reply.headers["content-type"].startswith(kind), path
        assert reply.headers["content-security-policy"] == CSP
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["x-frame-options"] == "DENY"
        assert reply.headers["referrer-policy"] == "no-referrer"
        assert int(reply.headers["content-length"]) == len(reply.body)
    assert "script-src 'self'" in CSP
    assert "frame-ancestors 'none'" in CSP
    assert "unsafe" not in CSP
    page = get(server, "/console/")
    assert page.body == (ASSETS / "index.html").read_bytes()
    assert page.headers["cache-control"] == "no-cache"
    again = get(server, "/console/", **{"If-None-Match": page.headers["etag"]})
    assert again.status == 304
    assert again.body == b""
    assert get(server, "/console/api/summary").headers["cache-control"] == "no-store"
    for name in ("console.js", "dom.js", "chart.js", "tryit.js", "actions.js"):
        assert get(server, f"/console/assets/{name}").body == (ASSETS / name).read_bytes()


def test_the_assets_insert_no_html_and_run_no_inline_script() -> None:
    html = (ASSETS / "index.html").read_text()
    scripts = re.findall(r"<script\b[^>]*>", html)
    assert scripts
    assert all('src="/console/assets/' in tag for tag in scripts)
    assert re.search(r"<script\b[^>]*>\s*[^<\s]", html) is None  # no inline body
    assert re.search(r"\son[a-z]+=", html) is None  # no inline handler
    for script in ASSETS.glob("*.js"):
        text = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in text, (script.name, sink)
        assert "http://" not in text.replace("${location.protocol}//", "")  # nothing remote
        assert "https://" not in text


@pytest.mark.parametrize(
    "path",
    [
        "/console/../v2/health/ready",
        "/console/assets/../app.py",
        "/console/assets/../live.py",
        "/console/assets/%2e%2e/app.py",
        "/console/assets/..%2fapp.py",
        "/console/assets/%2E%2E%2Fapp.py",
        "/console/%2e%2e/%2e%2e/etc/passwd",
        "/console/assets//etc/passwd",
        "/console/assets/..\\app.py",
        "/console/assets/.hidden",
        "/console/assets/",
        "/console/assets/app.py",
        "/console/assets/__init__.py",
        "/console/nothing",
    ],
)
def test_paths_outside_the_assets_are_refused(server: ServerProcess, path: str) -> None:
    reply = get(server, path)
    assert reply.status == 404, reply.body
    assert b"import" not in reply.body
    assert reply.headers["content-security-policy"] == CSP


def test_only_get_and_head_are_served(server: ServerProcess) -> None:
    reply = raw_request(server.http_url, "POST", "/console/api/summary", body=b"{}")
    assert reply.status == 405
    head = raw_request(server.http_url, "HEAD", "/console/")
    assert head.status == 200
    assert int(head.headers["content-length"]) == len((ASSETS / "index.html").read_bytes())


def _events(server: ServerProcess, query: str, count: int) -> tuple[dict[str, str], list[Any]]:
    """The first ``count`` events of the stream (and the reply's headers), in the order sent."""
    host, port = server.http_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=READ_LIMIT_S)
    try:
        conn.request("GET", "/console/api/events" + query)
        reply = conn.getresponse()
        headers = {k.lower(): v for k, v in reply.getheaders()}
        assert reply.status == 200
        assert reply.readline() == b"retry: 2000\n"
        assert reply.readline() == b"\n"
        events = []
        while len(events) < count:
            assert reply.readline() == b"event: stats\n"
            data = reply.readline()
            assert data.startswith(b"data: ")
            assert data.endswith(b"\n")
            assert reply.readline() == b"\n"
            events.append(json.loads(data[len(b"data: ") :]))
        return headers, events
    finally:
        conn.close()


def test_the_event_stream_sends_a_window_a_second(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    a = np.ones((1, 16), dtype=np.int32)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    try:
        for _ in range(20):
            client.infer("simple", inputs)
        headers, events = _events(server, "?model=simple", 3)
    finally:
        client.close()
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert headers["cache-control"] == "no-store"
    assert headers["content-security-policy"] == CSP
    first, second = events[0], events[1]
    assert first["window_s"] == 0
    assert 0.5 <= second["window_s"] < 10  # at least half a tick
    [simple] = first["models"]
    assert (simple["name"], simple["version"]) == ("simple", "1")
    assert simple["totals"]["success"] == 20  # the counters the engine keeps, not parsed text
    assert simple["totals"]["batches"] == {"1": 20}
    assert set(simple["split_us"]) == {"queue", "input", "infer", "output"}
    assert second["rss_bytes"] > 0
    assert second["cpu_percent"] >= 0
    headers, plain = _events(server, "", 1)
    assert "totals" not in plain[0]["models"][0]  # the detail is for the page's own model


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?model=simple&x=1", "unknown query parameter 'x'"),
        ("?model=a&model=b", "give the query parameter 'model' once"),
        ("?model=..", "model name"),
    ],
)
def test_bad_event_queries_are_refused(server: ServerProcess, query: str, message: str) -> None:
    reply = get(server, "/console/api/events" + query)
    assert reply.status == 400
    assert message in reply.error


def test_the_summary_holds_the_index_only_for_who_may_read_it(server: ServerProcess) -> None:
    without = get(server, "/console/api/summary").json()
    assert without["index_complete"] is False
    assert [(m["name"], m["state"]) for m in without["models"]] == [("simple", "READY")]
    summary = get(server, "/console/api/summary", Authorization=f"Bearer {TOKEN}").json()
    assert summary["index_complete"] is True
    with httpclient.InferenceServerClient(server.http_url) as client:
        index = client.get_model_repository_index(headers={"Authorization": f"Bearer {TOKEN}"})
    assert [(m["name"], m.get("state")) for m in summary["models"]] == [
        (m["name"], m.get("state")) for m in index
    ]
    [simple] = [m for m in summary["models"] if m["name"] == "simple"]
    assert simple["runtime"] == "onnxruntime"
    assert simple["max_batch_size"] == 8
    server_part = summary["server"]
    assert server_part["control_mode"] == "explicit"
    assert server_part["ports"]["http"] == server.ports["http"]
    assert server_part["apis"]["model-repository"] == "token"
    assert server_part["apis"]["console"] == "open"
    assert server_part["apis"]["rollout"] == "token"


def test_the_completed_config_as_pbtxt(server: ServerProcess) -> None:
    reply = get(server, "/console/api/config?model=simple")
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/plain; charset=utf-8"
    assert 'name: "simple"' in reply.body.decode()
    assert "max_batch_size: 8" in reply.body.decode()
    assert get(server, "/console/api/config").status == 400
    assert get(server, "/console/api/config?model=spare").status in (400, 404)


@pytest.fixture(scope="module")
def restricted(repo: Path) -> Iterator[ServerProcess]:
    args = ["--http-restricted-api", "console:console-key=let-me-in", "--load-model", "simple"]
    with running_server([repo], ["--model-control-mode", "explicit", *args]) as proc:
        yield proc


def test_the_console_group_can_be_restricted(restricted: ServerProcess) -> None:
    for path in ("/console/", "/console/assets/console.js", "/console/api/summary"):
        refused = get(restricted, path)
        assert refused.status == 403
        assert "expecting header 'console-key'" in refused.error
        assert get(restricted, path, **{"console-key": "let-me-in"}).status == 200
    assert get(restricted, "/v2/health/ready").status == 200  # other groups are unaffected
    with pytest.raises(InvalidArgumentError, match="console"):
        ServerConfig(
            model_repositories=(Path("."),),
            grpc_restricted_protocols=(parse_restriction("console:k=v"),),
        )


@pytest.fixture(scope="module")
def open_explicit(repo: Path) -> Iterator[ServerProcess]:
    """Explicit mode without a token: load and unload are open to every client."""
    with running_server(
        [repo], ["--model-control-mode", "explicit", "--load-model", "simple"]
    ) as p:
        yield p


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
    ],
)
def test_a_browser_cannot_change_the_server_from_another_site(
    open_explicit: ServerProcess, headers: dict[str, str]
) -> None:
    client = httpclient.InferenceServerClient(open_explicit.http_url)
    try:
        reply = raw_request(
            open_explicit.http_url,
            "POST",
            "/v2/repository/models/simple/unload",
            body=b"{}",
            headers={"Content-Type": "text/plain", **headers},
        )
        assert reply.status == 403
        assert "another site" in reply.error or "not this server's" in reply.error
        assert client.is_model_ready("simple")
    finally:
        client.close()


def test_same_origin_and_non_browser_clients_still_change_the_server(
    open_explicit: ServerProcess,
) -> None:
    client = httpclient.InferenceServerClient(open_explicit.http_url)
    try:
        origin = {"Origin": f"http://{open_explicit.http_url}", "Host": open_explicit.http_url}
        reply = raw_request(
            open_explicit.http_url, "POST", "/v2/repository/models/spare/load", b"{}", origin
        )
        assert reply.status == 200, reply.body
        assert client.is_model_ready("spare")
        same = {"Sec-Fetch-Site": "same-origin"}
        reply = raw_request(
            open_explicit.http_url, "POST", "/v2/repository/models/spare/unload", b"{}", same
        )
        assert reply.status == 200, reply.body
        client.load_model("spare")  # tritonclient sends neither header
        assert client.is_model_ready("spare")
    finally:
        client.close()


def test_the_console_can_be_turned_off(repo: Path) -> None:
    with running_server([repo], ["--allow-console=false"]) as off:
        for path in ("/console", "/console/", "/console/api/summary", "/console/api/events"):
            reply = get(off, path)
            assert reply.status == 404, path
            assert "content-security-policy" not in reply.headers  # the v2 app answered
        assert get(off, "/v2/health/ready").status == 200
