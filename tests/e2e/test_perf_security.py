"""``inferd perf`` against a protected ``inferd serve``: request headers (``-H``) for restricted
APIs over HTTP and gRPC (unary and streaming), and TLS with perf_analyzer's ``--ssl-*`` flags
against a server that asks for client certificates (mutual TLS), with certificates made here."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import write_add_sub
from tests.helpers.pki import Pki, make_pki

pytestmark = pytest.mark.e2e

SECRET = "s3cret-value"
SHORT = ["-p", "250", "-r", "3", "-q"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    write_add_sub(root, "simple")
    return root


@pytest.fixture(scope="module")
def restricted(repo: Path) -> Iterator[ServerProcess]:
    """Inference and statistics over HTTP, inference and metadata over gRPC need the header."""
    args = [
        "--model-control-mode", "explicit", "--load-model", "simple",
        "--http-restricted-api", f"inference,statistics:x-api-key={SECRET}",
        "--grpc-restricted-protocol", f"inference,metadata:x-api-key={SECRET}",
    ]  # fmt: skip
    with running_server([repo], args) as proc:
        yield proc


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mutual_tls(repo: Path, pki: Pki) -> Iterator[ServerProcess]:
    args = ["--model-control-mode", "explicit", "--load-model", "simple"]
    for proto in ("http", "grpc"):
        args += [
            f"--{proto}-use-ssl-mutual", f"--{proto}-server-cert", str(pki.server_cert),
            f"--{proto}-server-key", str(pki.server_key), f"--{proto}-root-cert", str(pki.ca),
        ]  # fmt: skip
    with running_server([repo], args) as proc:
        yield proc


def perf(*argv: str | Path, expect: int) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "perf", "-m", "simple", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == expect, done.stdout + done.stderr
    return done


def _measured(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    (point,) = document["points"]
    assert point["request_count"] > 0
    assert point["error_count"] == 0
    assert point["server"]["request_count"] > 0  # the statistics calls were let through
    return document


@pytest.mark.parametrize(
    ("protocol", "extra"),
    [
        pytest.param("http", [], id="http"),
        pytest.param("grpc", [], id="grpc"),
        pytest.param("grpc", ["--streaming"], id="grpc-streaming"),
    ],
)
def test_headers_open_a_restricted_api(
    restricted: ServerProcess, protocol: str, extra: list[str], tmp_path: Path
) -> None:
    url = restricted.http_url if protocol == "http" else restricted.grpc_url
    out = tmp_path / "out.json"
    perf("-i", protocol, "-u", url, *extra, *SHORT, "-H", f"X-Api-Key: {SECRET}",
         "-H", "x-trace:on", "--json-output", out, expect=0)  # fmt: skip
    settings = _measured(out)["settings"]
    assert settings["headers"] == ["X-Api-Key", "x-trace"]  # names only, never the values
    assert settings["tls"] is False


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_without_the_header_the_run_stops_saying_what_to_send(
    restricted: ServerProcess, protocol: str
) -> None:
    url = restricted.http_url if protocol == "http" else restricted.grpc_url
    done = perf("-i", protocol, "-u", url, *SHORT, "-H", "x-api-key:wrong", expect=3)
    err = done.stderr.strip()
    assert err.startswith("inferd perf: error: ")
    # Triton's words; over gRPC Triton names the metadata triton-grpc-protocol-x-api-key
    prefix = "" if protocol == "http" else "triton-grpc-protocol-"
    assert f"is restricted, expecting header '{prefix}x-api-key'" in err
    assert "send the header the server expects with -H NAME:VALUE" in err
    assert "Traceback" not in err


def test_https_with_a_client_certificate(
    mutual_tls: ServerProcess, pki: Pki, tmp_path: Path
) -> None:
    out = tmp_path / "out.json"
    perf("-u", f"https://{mutual_tls.http_url}", *SHORT, "--json-output", out,
         "--ssl-https-ca-certificates-file", pki.ca, "--ssl-https-verify-peer", "1",
         "--ssl-https-verify-host", "2", "--ssl-https-client-certificate-file", pki.client_cert,
         "--ssl-https-client-certificate-type", "PEM", "--ssl-https-private-key-file",
         pki.client_key, "--ssl-https-private-key-type", "PEM", expect=0)  # fmt: skip
    assert _measured(out)["settings"]["tls"] is True


@pytest.mark.parametrize("extra", [[], ["--streaming"]], ids=["grpc", "grpc-streaming"])
def test_grpc_over_tls_with_a_client_certificate(
    mutual_tls: ServerProcess, pki: Pki, extra: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "out.json"
    perf("-i", "grpc", "-u", mutual_tls.grpc_url, *extra, *SHORT, "--json-output", out,
         "--ssl-grpc-use-ssl", "--ssl-grpc-root-certifications-file", pki.ca,
         "--ssl-grpc-private-key-file", pki.client_key,
         "--ssl-grpc-certificate-chain-file", pki.client_cert, expect=0)  # fmt: skip
    assert _measured(out)["settings"]["tls"] is True


def test_a_certificate_from_another_ca_is_not_accepted(mutual_tls: ServerProcess, pki: Pki) -> None:
    client = ["--ssl-https-client-certificate-file", pki.client_cert,
              "--ssl-https-private-key-file", pki.client_key]  # fmt: skip
    done = perf("-u", f"https://{mutual_tls.http_url}", *SHORT, *client,
                "--ssl-https-ca-certificates-file", pki.other_ca, expect=3)  # fmt: skip
    assert "was not accepted (" in done.stderr
    assert "--ssl-https-ca-certificates-file" in done.stderr
    done = perf("-i", "grpc", "-u", mutual_tls.grpc_url, *SHORT, "--ssl-grpc-use-ssl",
                "--ssl-grpc-root-certifications-file", pki.other_ca, expect=3)  # fmt: skip
    assert "was not accepted (" in done.stderr
    assert "--ssl-grpc-root-certifications-file" in done.stderr
