"""perf_analyzer's ``-H`` and ``--ssl-*`` flags on ``inferd perf`` and ``inferd analyze``: each
carried out with perf_analyzer's meaning or refused in one line that says what to do, and the TLS
contexts they build."""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path

import pytest

from inferd.cli.main import build_parser, main
from inferd.cli.perf_args import options_from_args
from inferd.client.tls import GrpcTlsSettings, HttpsSettings
from inferd.errors import InvalidArgumentError
from tests.helpers.pki import Pki, make_pki

EXAMPLES = str(Path(__file__).resolve().parents[2] / "examples" / "models")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")
    return make_pki(tmp_path_factory.mktemp("pki"))


def _perf(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["perf", "-m", "simple", *argv])


def test_headers_and_tls_reach_the_options(pki: Pki) -> None:
    opts = options_from_args(_perf("-H", "x-api-key:s", "-H", "Authorization: Bearer t"))
    assert opts.headers == (("x-api-key", "s"), ("Authorization", "Bearer t"))
    assert opts.https is None
    assert opts.grpc_tls is None
    https_flags = [
        "-u", "https://127.0.0.1:8443", "--ssl-https-ca-certificates-file", str(pki.ca),
        "--ssl-https-verify-host", "0", "--ssl-https-client-certificate-file",
        str(pki.client_cert), "--ssl-https-private-key-file", str(pki.client_key),
        "--ssl-https-client-certificate-type", "PEM",
    ]  # fmt: skip
    https = options_from_args(_perf(*https_flags))
    assert https.https == HttpsSettings(
        verify_peer=True,
        verify_host=False,
        ca_file=pki.ca,
        cert_file=pki.client_cert,
        key_file=pki.client_key,
    )
    assert options_from_args(_perf("-u", "https://h:1")).https == HttpsSettings()
    grpc_flags = [
        "-i", "grpc", "--streaming", "--ssl-grpc-use-ssl",
        "--ssl-grpc-root-certifications-file", str(pki.ca),
        "--ssl-grpc-private-key-file", str(pki.client_key),
        "--ssl-grpc-certificate-chain-file", str(pki.client_cert),
    ]  # fmt: skip
    grpc = options_from_args(_perf(*grpc_flags))
    assert grpc.grpc_tls == GrpcTlsSettings(pki.ca, pki.client_key, pki.client_cert)
    assert grpc.https is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-H", "nocolon"], "-H 'nocolon': expected NAME:VALUE"),
        (["-H", "x:a\rb"], "printable ASCII, without CR, LF"),
        (["-H", "a:1", "-H", "A:2"], "-H A is given twice"),
        (["-i", "grpc", "-H", "grpc-timeout:1S"], "gRPC's own"),
        (["-i", "in-process", "--model-repository", "r", "-H", "a:1"], "-H is for a server"),
        (["-i", "in-process", "--model-repository", "r", "--ssl-grpc-use-ssl"], "in-process"),
        (["--ssl-https-verify-peer", "0"], "applies to an HTTPS server: give -u https://"),
        (["--ssl-grpc-use-ssl"], "--ssl-grpc-use-ssl is for -i grpc"),
        (["-i", "grpc", "--ssl-https-verify-host", "1"], "over gRPC use --ssl-grpc-use-ssl"),
        (["-i", "grpc", "-u", "https://h:1"], "with -i grpc give -u HOST:PORT and --ssl-grpc"),
        (["-i", "grpc", "--ssl-grpc-root-certifications-file", "ca"], "needs --ssl-grpc-use-ssl"),
        (
            ["-i", "grpc", "--ssl-grpc-use-ssl", "--ssl-grpc-private-key-file", "k"],
            "go together",
        ),
        (
            ["-u", "https://h:1", "--ssl-https-private-key-type", "DER"],
            "DER is not supported: convert the file to PEM (openssl pkey",
        ),
        (
            ["-u", "https://h:1", "--ssl-https-private-key-file", "k"],
            "needs --ssl-https-client-certificate-file",
        ),
    ],
)
def test_flags_that_cannot_apply_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["perf", "-m", "simple", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("inferd perf: error: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ssl-https-verify-peer", "2"], "'2' is not one of 0, 1"),
        (["--ssl-https-verify-host", "3"], "'3' is not one of 0, 1, 2"),
        (["--ssl-https-client-certificate-type", "P12"], "'P12' is not PEM or DER"),
    ],
)
def test_values_outside_perf_analyzers_choices_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["perf", "-m", "simple", "-u", "https://h:1", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_tls_contexts_follow_the_flags(pki: Pki) -> None:
    strict = HttpsSettings(ca_file=pki.ca).context()
    assert strict.verify_mode == ssl.CERT_REQUIRED
    assert strict.check_hostname
    assert not HttpsSettings(verify_host=False).context().check_hostname
    loose = HttpsSettings(verify_peer=False).context()
    assert loose.verify_mode == ssl.CERT_NONE
    assert not loose.check_hostname
    HttpsSettings(cert_file=pki.client_cert, key_file=pki.client_key).context()
    grpc = GrpcTlsSettings(pki.ca, pki.client_key, pki.client_cert)
    assert grpc.context().check_hostname
    root, key, chain = grpc.read()
    assert root == pki.ca.read_bytes()
    assert key == pki.client_key.read_bytes()
    assert chain == pki.client_cert.read_bytes()


def test_unreadable_tls_files_name_their_flag(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(InvalidArgumentError, match=r"--ssl-https-ca-certificates-file .*no such"):
        HttpsSettings(ca_file=missing).context()
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(InvalidArgumentError, match="holds no PEM certificate"):
        GrpcTlsSettings(root_file=junk).context()
    with pytest.raises(InvalidArgumentError, match="not a PEM certificate and its private key"):
        HttpsSettings(cert_file=pki.client_cert, key_file=pki.server_key).context()
    with pytest.raises(InvalidArgumentError, match=r"--ssl-grpc-private-key-file .*No such file"):
        GrpcTlsSettings(key_file=missing, chain_file=pki.client_cert).read()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-H", "k:v"], "-H is for a server given with -u"),
        (["--admin-token-file", "t"], "--admin-token-file is for a server given with -u"),
        (["-i", "grpc", "--ssl-grpc-use-ssl"], "--ssl-grpc-use-ssl is for a server given with -u"),
        (["--ssl-https-verify-peer", "0"], "give -u https://HOST:PORT"),
        (["-i", "in-process", "--admin-token-file", "t"], "calls the engine directly"),
        (["-i", "in-process", "-H", "k:v"], "-H is for a server over the network"),
        (["-u", "h:1", "-H", "bad"], "expected NAME:VALUE"),
        (
            ["-u", "h:1", "-H", "authorization:Bearer x", "--admin-token-file", __file__],
            "-H Authorization and the admin token of --admin-token-file would both be sent",
        ),
    ],
)
def test_analyze_refuses_what_its_own_server_does_not_need(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["analyze", "simple", "--model-repository", EXAMPLES, "--results", str(tmp_path)]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("inferd analyze: error: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_analyze_reads_the_admin_token_as_serve_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inferd.cli.analyze_args import options_from_args as analyze_options

    token = tmp_path / "token"
    token.write_text("  t0ken\n")
    argv = ["analyze", "simple", "--model-repository", EXAMPLES, "-u", "h:1"]
    monkeypatch.setenv("INFERD_ADMIN_TOKEN", "from-env")
    parsed = build_parser().parse_args([*argv, "--admin-token-file", str(token), "-H", "k:v"])
    options = analyze_options(parsed)
    assert options.admin_token == "t0ken"
    assert options.connection.headers == (("k", "v"),)
    assert analyze_options(build_parser().parse_args(argv)).admin_token == "from-env"
    monkeypatch.delenv("INFERD_ADMIN_TOKEN")
    assert analyze_options(build_parser().parse_args(argv)).admin_token is None
    token.write_text("\n")
    with pytest.raises(InvalidArgumentError, match="is empty"):
        analyze_options(build_parser().parse_args([*argv, "--admin-token-file", str(token)]))
