"""``inferd rollout``: the command drives a running server's admin API (set, show, promote,
clear), checks a policy file before sending it, and says in one line what went wrong: exit
status 2 for a bad command line or policy file, 1 for a server that cannot be reached, refuses
or fails. It sends the extra headers (``-H``) and speaks HTTPS with the ``--ssl-https-*``
flags."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import ADD_SUB_CONFIG, write_add_sub
from tests.helpers.pki import Pki, make_pki
from tests.helpers.rollout_models import ALL_VERSIONS

pytestmark = pytest.mark.e2e

TOKEN = "cli-secret"
SECRET = "rollout-header-value"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("rollout_cli")
    write_add_sub(root / "models", "addsub", (1, 2), config=ADD_SUB_CONFIG + ALL_VERSIONS)
    (root / "token").write_text(TOKEN)
    with running_server([root / "models"], ["--admin-token-file", str(root / "token")]) as proc:
        yield proc


def _cli(*args: str, token: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("INFERD_ADMIN_TOKEN", None)
    if token:
        env["INFERD_ADMIN_TOKEN"] = TOKEN
    return subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "rollout", *args],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip


def test_the_rollout_command(server: ServerProcess, tmp_path: Path) -> None:
    policy = tmp_path / "canary.yaml"
    policy.write_text("kind: canary\nprimary: {version: 1}\ncandidate: {version: 2}\n"
                      "stages: [0.25, 1.0]\nauto_promote: false\n")  # fmt: skip
    url = server.http_url
    done = _cli("set", "addsub", str(policy), "-u", url)
    assert done.returncode == 0, done.stderr
    assert "canary policy" in done.stdout
    assert "stage 1 of 2 (25.0% to the candidate), running" in done.stdout
    refused = _cli("promote", "addsub", "-u", url, token=False)
    assert refused.returncode == 1
    assert "HTTP 401" in refused.stderr
    assert "INFERD_ADMIN_TOKEN" in refused.stderr
    promoted = _cli("promote", "addsub", "-u", url)
    assert "stage 2 of 2 (100.0% to the candidate)" in promoted.stdout, promoted.stderr
    shown = _cli("show", "addsub", "--json", "-u", url, token=False)
    assert json.loads(shown.stdout)["canary"]["stage"] == 1
    policy.write_text("kind: canary\ncandidate: {version: 2}\n")
    wrong = _cli("set", "addsub", str(policy), "-u", url)
    assert wrong.returncode == 2
    assert wrong.stderr.strip().endswith("primary: required: the version serving today, e.g. "
                                         "{version: 1}")  # fmt: skip
    assert len(wrong.stderr.strip().splitlines()) == 1
    cleared = _cli("clear", "addsub", "-u", url)
    assert cleared.returncode == 0
    assert _cli("show", "addsub", "-u", url).returncode == 1


def test_a_wrong_policy_file_stops_the_server_at_start(tmp_path: Path) -> None:
    model = write_add_sub(
        tmp_path / "models", "addsub", (1, 2), config=ADD_SUB_CONFIG + ALL_VERSIONS
    )
    (model / "rollout.yaml").write_text(
        "kind: canary\nprimary: {version: 1}\ncandidate: {version: 3}\n"
    )
    cmd = [sys.executable, "-m", "inferd.cli.main", "serve", "--model-repository",
           str(tmp_path / "models"), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
           "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "model 'addsub' serves without a traffic policy" in done.stderr
    assert "rollout.yaml: rollout policy: candidate: Request for unknown model" in done.stderr
    assert "inferd ready" not in done.stderr + done.stdout


def test_an_unreachable_server_is_named_and_is_not_a_command_line_error() -> None:
    with socket.socket() as held:  # bound, never listening: a connection is refused
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        done = _cli("show", "addsub", "-u", f"127.0.0.1:{port}")
    assert done.returncode == 1, done.stderr
    err = done.stderr.strip()
    assert err.startswith(f"inferd rollout show: error: http://127.0.0.1:{port} did not answer")
    assert len(err.splitlines()) == 1


def test_a_missing_token_is_a_401_that_says_what_to_pass(server: ServerProcess) -> None:
    refused = _cli("rollback", "addsub", "-u", server.http_url, token=False)
    assert refused.returncode == 1
    err = refused.stderr.strip()
    assert err.startswith("inferd rollout rollback: error: the server refused the rollout call "
                          "(HTTP 401: ")  # fmt: skip
    assert err.endswith("pass its admin token with --admin-token-file FILE (or the "
                        "INFERD_ADMIN_TOKEN environment variable)")  # fmt: skip
    feedback = _cli("feedback", "addsub", "--id", "x", "--reward", "1", "-u", server.http_url,
                    token=False)  # fmt: skip
    assert feedback.returncode == 1
    assert "--feedback-token-file FILE" in feedback.stderr


@pytest.fixture(scope="module")
def protected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Pki]]:
    pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    root = tmp_path_factory.mktemp("rollout_tls")
    write_add_sub(root / "models", "addsub", (1, 2), config=ADD_SUB_CONFIG + ALL_VERSIONS)
    (root / "token").write_text(TOKEN)
    args = [
        "--admin-token-file", str(root / "token"),
        "--http-restricted-api", f"rollout:x-api-key={SECRET}",
        "--http-use-ssl", "--http-server-cert", str(pki.server_cert),
        "--http-server-key", str(pki.server_key),
    ]  # fmt: skip
    with running_server([root / "models"], args) as proc:
        yield proc, pki


def test_headers_and_tls_reach_a_protected_server(
    protected: tuple[ServerProcess, Pki], tmp_path: Path
) -> None:
    server, pki = protected
    tls = ["-u", f"https://{server.http_url}", "--ssl-https-ca-certificates-file", str(pki.ca)]
    policy = tmp_path / "split.yaml"
    policy.write_text("kind: canary\nprimary: {version: 1}\ncandidate: {version: 2}\n"
                      "stages: [0.5, 1.0]\nauto_promote: false\n")  # fmt: skip
    done = _cli("set", "addsub", str(policy), *tls, "-H", f"x-api-key:{SECRET}")
    assert done.returncode == 0, done.stderr
    assert "stage 1 of 2 (50.0% to the candidate)" in done.stdout
    no_header = _cli("promote", "addsub", *tls)
    assert no_header.returncode == 1
    err = no_header.stderr.strip()
    assert "expecting header 'x-api-key'" in err
    assert err.endswith("pass the header it expects with -H NAME:VALUE")
    no_token = _cli("promote", "addsub", *tls, "-H", f"x-api-key:{SECRET}", token=False)
    assert no_token.returncode == 1
    assert "(HTTP 401: " in no_token.stderr
    untrusted = _cli("show", "addsub", "-u", f"https://{server.http_url}", "-H",
                     f"x-api-key:{SECRET}")  # fmt: skip
    assert untrusted.returncode == 1
    assert "was not accepted" in untrusted.stderr
    assert "--ssl-https-ca-certificates-file" in untrusted.stderr
