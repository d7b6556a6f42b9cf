"""The gRPC edge of a real ``inferd serve``: restricted API groups, the admin token, TLS and
mutual TLS, driven by the official ``tritonclient.grpc`` (``headers=`` become call metadata).

Certificates are made here with the ``cryptography`` package: a CA, a server certificate for
127.0.0.1 and a client certificate, all signed by that CA.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import write_add_sub

pytestmark = pytest.mark.e2e

SECRET = "s3cret-value"
TOKEN = "admin-token-for-grpc-tests"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    write_add_sub(root, "simple")
    write_add_sub(root, "spare")  # loaded and unloaded by the tests
    return root


def _infer_simple(client: grpcclient.InferenceServerClient, **kwargs: Any) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(a)
    result = client.infer("simple", inputs, **kwargs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


def _refused(call: Callable[[], Any]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


# -- restricted groups and the admin token ------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(repo: Path) -> Iterator[ServerProcess]:
    args = [
        "--model-control-mode", "explicit", "--load-model", "simple",
        "--grpc-restricted-protocol", f"model-repository:Admin-Key={SECRET}",
        "--allow-shared-memory=true",
    ]  # fmt: skip
    with running_server([repo], args, env={"INFERD_ADMIN_TOKEN": TOKEN}) as proc:
        yield proc


@pytest.fixture
def client(guarded: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(guarded.grpc_url) as c:
        yield c


def test_restricted_group_needs_its_metadata(client: grpcclient.InferenceServerClient) -> None:
    bearer = {"authorization": f"Bearer {TOKEN}"}
    for call in (
        lambda **kw: client.load_model("spare", **kw),
        lambda **kw: client.unload_model("spare", **kw),
        lambda **kw: client.get_model_repository_index(**kw),
    ):
        for headers in (bearer, {**bearer, "admin-key": "wrong"}):
            error = _refused(lambda c=call, h=headers: c(headers=h))  # type: ignore[misc]
            # PERMISSION_DENIED, as PROTOCOL.md says (Triton answers UNAVAILABLE, which clients
            # retry as if the server were busy); Triton's words
            assert error.status() == "StatusCode.PERMISSION_DENIED"
            assert error.message() == (
                "This protocol is restricted, expecting header 'triton-grpc-protocol-Admin-Key'"
            )

    both = {"admin-key": SECRET, **bearer}
    client.load_model("spare", headers=both)
    assert client.is_model_ready("spare")
    index = client.get_model_repository_index(headers=both, as_json=True)
    assert {"name": "spare", "version": "1", "state": "READY"} in index["models"]
    client.unload_model("spare", headers=both)
    assert not client.is_model_ready("spare")


def test_restricted_group_takes_tritons_metadata_key(
    client: grpcclient.InferenceServerClient,
) -> None:
    """Triton reads a restriction's KEY from the metadata ``triton-grpc-protocol-KEY``; the bare
    KEY (inferd's earlier form) is still read too."""
    bearer = {"authorization": f"Bearer {TOKEN}"}
    triton_form = {"triton-grpc-protocol-admin-key": SECRET, **bearer}
    client.load_model("spare", headers=triton_form)
    assert client.is_model_ready("spare")
    index = client.get_model_repository_index(headers=triton_form, as_json=True)
    assert {"name": "spare", "version": "1", "state": "READY"} in index["models"]
    wrong = {"triton-grpc-protocol-admin-key": "wrong", **bearer}
    error = _refused(lambda: client.unload_model("spare", headers=wrong))
    assert error.status() == "StatusCode.PERMISSION_DENIED"
    client.unload_model("spare", headers=triton_form)
    assert not client.is_model_ready("spare")


def test_admin_token_is_required_on_top(client: grpcclient.InferenceServerClient) -> None:
    for headers in (
        {"admin-key": SECRET},
        {"admin-key": SECRET, "authorization": "Bearer wrong"},
        {"admin-key": SECRET, "authorization": TOKEN},  # no scheme
    ):
        error = _refused(lambda h=headers: client.load_model("spare", headers=h))  # type: ignore[misc]
        assert error.status() == "StatusCode.UNAUTHENTICATED"
        assert "requires the header 'Authorization: Bearer <token>'" in str(error.message())
    # shared memory is an admin group too; without the token it is refused before it runs
    error = _refused(lambda: client.unregister_system_shared_memory())
    assert error.status() == "StatusCode.UNAUTHENTICATED"
    client.unregister_system_shared_memory(headers={"authorization": f"Bearer {TOKEN}"})


def test_other_groups_are_unaffected(client: grpcclient.InferenceServerClient) -> None:
    _infer_simple(client)
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert client.get_model_metadata("simple").name == "simple"
    assert client.get_model_config("simple").config.name == "simple"
    assert client.get_inference_statistics("simple").model_stats


# -- TLS ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca: bytes
    server_cert: Path
    server_key: Path
    ca_file: Path
    client_cert: bytes
    client_key: bytes


def _make_pki(folder: Path) -> Pki:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("inferd test CA"))
        .issuer_name(name("inferd test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def issue(cn: str, usage: x509.ObjectIdentifier, san: bool) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if san:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)

    server_cert, server_key = issue("server", ExtendedKeyUsageOID.SERVER_AUTH, san=True)
    client_cert, client_key = issue("client", ExtendedKeyUsageOID.CLIENT_AUTH, san=False)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    for file, data in (("ca.pem", ca_pem), ("server.pem", server_cert), ("server.key", server_key)):
        (folder / file).write_bytes(data)
    return Pki(
        ca_pem,
        folder / "server.pem",
        folder / "server.key",
        folder / "ca.pem",
        client_cert,
        client_key,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")
    return _make_pki(tmp_path_factory.mktemp("pki"))


def _tls_args(pki: Pki) -> list[str]:
    return [
        "--load-model", "simple", "--model-control-mode", "explicit",
        "--grpc-server-cert", str(pki.server_cert), "--grpc-server-key", str(pki.server_key),
    ]  # fmt: skip


def test_tls(repo: Path, pki: Pki) -> None:
    with running_server([repo], [*_tls_args(pki), "--grpc-use-ssl"]) as proc:
        with grpcclient.InferenceServerClient(
            proc.grpc_url, ssl=True, root_certificates=str(pki.ca_file)
        ) as client:
            assert client.is_server_live()
            _infer_simple(client)
        # a client that does not speak TLS gets no answer from the TLS port
        with grpcclient.InferenceServerClient(proc.grpc_url) as plain:
            error = _refused(lambda: plain.is_server_live(client_timeout=5))
            assert error.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


def test_mutual_tls_refuses_a_client_without_a_certificate(
    repo: Path, pki: Pki, tmp_path: Path
) -> None:
    args = [*_tls_args(pki), "--grpc-use-ssl-mutual", "--grpc-root-cert", str(pki.ca_file)]
    (tmp_path / "client.pem").write_bytes(pki.client_cert)
    (tmp_path / "client.key").write_bytes(pki.client_key)
    with running_server([repo], args) as proc:
        with grpcclient.InferenceServerClient(
            proc.grpc_url,
            ssl=True,
            root_certificates=str(pki.ca_file),
            private_key=str(tmp_path / "client.key"),
            certificate_chain=str(tmp_path / "client.pem"),
        ) as client:
            assert client.is_server_live()
            _infer_simple(client)
        with grpcclient.InferenceServerClient(
            proc.grpc_url, ssl=True, root_certificates=str(pki.ca_file)
        ) as anonymous:
            error = _refused(lambda: anonymous.is_server_live(client_timeout=5))
            assert error.status() == "StatusCode.UNAVAILABLE"
        assert proc.process.poll() is None


def test_unusable_tls_files_are_refused_at_start(repo: Path, pki: Pki, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    args = [
        "--grpc-use-ssl", "--grpc-server-cert", str(junk), "--grpc-server-key", str(pki.server_key)
    ]  # fmt: skip
    with pytest.raises(RuntimeError) as caught, running_server([repo], args):
        pass
    assert f"cannot use the TLS certificate '{junk}'" in str(caught.value)
