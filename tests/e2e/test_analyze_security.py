"""``inferd analyze -u`` against a protected ``inferd serve``: model control behind the admin
token and a restricted API's header, inference behind the same header, HTTP over TLS. With the
token (``--admin-token-file`` or ``INFERD_ADMIN_TOKEN``), ``-H`` and the CA the analysis runs;
without one of them it stops at once with exit code 1 and one line saying what to pass. The
analyzer's own server, which inherits ``INFERD_ADMIN_TOKEN``, is sent that token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import write_add_sub
from tests.helpers.pki import Pki, make_pki

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOKEN = "admin-token-for-analyze"
SECRET = "s3cret-value"
# the model's own config and one candidate, one load point, short windows
ONE = [
    "--instances", "1", "--dynamic-batching", "on", "--max-batch-sizes", "8",
    "--queue-delays-us", "100", "--threads", "auto", "--concurrency", "1",
    "--measurement-interval", "200", "--max-trials", "3", "--confirm", "0",
]  # fmt: skip


@dataclass(frozen=True)
class Protected:
    server: ServerProcess
    pki: Pki
    repo: Path
    token_file: Path


@pytest.fixture(scope="module")
def protected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Protected]:
    pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    repo = tmp_path_factory.mktemp("repo")
    write_add_sub(repo, "simple")
    token_file = tmp_path_factory.mktemp("token") / "admin-token"
    token_file.write_text(TOKEN + "\n")
    args = [
        "--model-control-mode", "explicit", "--load-model", "simple",
        "--admin-token-file", str(token_file),
        "--http-restricted-api", f"inference,model-repository:x-api-key={SECRET}",
        "--grpc-restricted-protocol", f"inference,model-repository:x-api-key={SECRET}",
        "--http-use-ssl", "--http-server-cert", str(pki.server_cert),
        "--http-server-key", str(pki.server_key),
    ]  # fmt: skip
    with running_server([repo], args) as proc:
        yield Protected(proc, pki, repo, token_file)


def analyze(
    p: Protected, results: Path, *args: str | Path, token_env: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "INFERD_ADMIN_TOKEN"}
    if token_env is not None:
        env["INFERD_ADMIN_TOKEN"] = token_env
    argv = ["simple", "--model-repository", p.repo, *ONE, "--results", results, *args]
    return subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "analyze", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def _https(p: Protected) -> list[str | Path]:
    return ["-u", f"https://{p.server.http_url}", "--ssl-https-ca-certificates-file", p.pki.ca]


def _measured_without_errors(results: Path) -> None:
    lines = (results / "measurements.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert [e["key"] for e in entries] == ["default", "i1-b8-q100"]
    for entry in entries:
        assert entry["error"] is None
        assert entry["points"][0]["throughput"] > 0


def test_https_with_the_token_file_and_the_header(protected: Protected, tmp_path: Path) -> None:
    token = ["--admin-token-file", protected.token_file]
    run = analyze(
        protected, tmp_path / "r", *_https(protected), *token, "-H", f"x-api-key:{SECRET}"
    )
    assert run.returncode == 0, run.stderr + run.stdout
    _measured_without_errors(tmp_path / "r")


def test_grpc_with_the_token_from_the_environment(protected: Protected, tmp_path: Path) -> None:
    run = analyze(protected, tmp_path / "r", "-u", protected.server.grpc_url, "-i", "grpc",
                  "-H", f"x-api-key:{SECRET}", token_env=TOKEN)  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    _measured_without_errors(tmp_path / "r")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_without_the_token_one_line_says_to_pass_it(
    protected: Protected, protocol: str, tmp_path: Path
) -> None:
    where = _https(protected) if protocol == "http" else ["-u", protected.server.grpc_url]
    run = analyze(protected, tmp_path / "r", *where, "-i", protocol, "-H", f"x-api-key:{SECRET}")
    assert run.returncode == 1, run.stderr + run.stdout
    err = run.stderr.strip()
    assert err.startswith("inferd analyze: error: the server refused model control (")
    assert err.endswith(
        "pass its admin token with --admin-token-file FILE (or the INFERD_ADMIN_TOKEN "
        "environment variable)"
    )
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "r" / "measurements.jsonl").exists()


def test_without_the_header_one_line_says_to_pass_it(protected: Protected, tmp_path: Path) -> None:
    run = analyze(protected, tmp_path / "r", *_https(protected), token_env=TOKEN)
    assert run.returncode == 1, run.stderr + run.stdout
    err = run.stderr.strip()
    assert "expecting header 'x-api-key'" in err
    assert err.endswith("pass the header it expects with -H NAME:VALUE")
    assert len(err.splitlines()) == 1


def test_its_own_server_inherits_the_environment_token_and_is_sent_it(
    protected: Protected, tmp_path: Path
) -> None:
    run = analyze(protected, tmp_path / "r", token_env="token-of-the-child-server")
    assert run.returncode == 0, run.stderr + run.stdout
    _measured_without_errors(tmp_path / "r")
