"""TLS for the load generator's clients, with perf_analyzer's settings and their meanings.

HTTPS (an ``https://`` server) follows libcurl's options as perf_analyzer passes them:
``verify_peer`` (``--ssl-https-verify-peer``, default on) checks the server's certificate against
the CA bundle (``--ssl-https-ca-certificates-file``, else the system's), ``verify_host``
(``--ssl-https-verify-host``; libcurl treats 1 as 2) checks that it names the host, and a client
certificate and key (PEM) answer a server that asks for one (mutual TLS).

gRPC over TLS (``--ssl-grpc-use-ssl``) takes the server's root certificates (else the system's)
and, for mutual TLS, the client's private key and certificate chain; the server's certificate is
always checked against the host, as gRPC does. The HTTP/2 connection asks for ``h2`` by ALPN.

A context is built once per transport (files are read then) and shared by its connections.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from inferd.errors import InvalidArgumentError, PerfRequestError

__all__ = ["GrpcTlsSettings", "HttpsSettings", "handshake_error"]


@dataclass(frozen=True)
class HttpsSettings:
    """TLS of an HTTPS server (the ``--ssl-https-*`` flags)."""

    verify_peer: bool = True
    verify_host: bool = True
    ca_file: Path | None = None
    cert_file: Path | None = None  # client certificate (PEM), for mutual TLS
    key_file: Path | None = None  # its private key (PEM); None: inside cert_file

    def context(self) -> ssl.SSLContext:
        """A client context for HTTP/1.1 over TLS (reads the files)."""
        context = _client_context(self.ca_file, "--ssl-https-ca-certificates-file")
        if not self.verify_peer:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif not self.verify_host:
            context.check_hostname = False
        if self.cert_file is not None:
            _load_chain(
                context,
                self.cert_file,
                self.key_file,
                "--ssl-https-client-certificate-file",
                "--ssl-https-private-key-file",
            )
        context.set_alpn_protocols(["http/1.1"])
        return context

    @property
    def hint(self) -> str:
        return (
            "give the CA that signed the server's certificate with "
            "--ssl-https-ca-certificates-file (or, to skip the check, --ssl-https-verify-peer 0)"
        )


@dataclass(frozen=True)
class GrpcTlsSettings:
    """TLS of a gRPC server (``--ssl-grpc-use-ssl`` and the ``--ssl-grpc-*`` files)."""

    root_file: Path | None = None
    key_file: Path | None = None  # client private key (PEM), for mutual TLS
    chain_file: Path | None = None  # client certificate chain (PEM)

    def __post_init__(self) -> None:
        if (self.key_file is None) != (self.chain_file is None):
            raise InvalidArgumentError(
                "--ssl-grpc-private-key-file and --ssl-grpc-certificate-chain-file go together"
            )

    def context(self) -> ssl.SSLContext:
        """A client context for the HTTP/2 client (reads the files); ALPN ``h2``."""
        context = _client_context(self.root_file, "--ssl-grpc-root-certifications-file")
        if self.chain_file is not None:
            _load_chain(
                context,
                self.chain_file,
                self.key_file,
                "--ssl-grpc-certificate-chain-file",
                "--ssl-grpc-private-key-file",
            )
        context.set_alpn_protocols(["h2"])
        return context

    def read(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """The root certificates, private key and certificate chain as PEM bytes, for grpcio."""
        return (
            _read(self.root_file, "--ssl-grpc-root-certifications-file"),
            _read(self.key_file, "--ssl-grpc-private-key-file"),
            _read(self.chain_file, "--ssl-grpc-certificate-chain-file"),
        )

    @property
    def hint(self) -> str:
        return "give the server's root certificate with --ssl-grpc-root-certifications-file"


def _client_context(ca_file: Path | None, flag: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(ca_file))
        except FileNotFoundError:
            raise InvalidArgumentError(f"{flag} '{ca_file}': no such file") from None
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgumentError(
                f"{flag} '{ca_file}' holds no PEM certificate that can be read ({_reason(exc)})"
            ) from None
    return context


def _load_chain(
    context: ssl.SSLContext, cert: Path, key: Path | None, cert_flag: str, key_flag: str
) -> None:
    for path, flag in ((cert, cert_flag), (key, key_flag)):
        if path is not None and not path.is_file():
            raise InvalidArgumentError(f"{flag} '{path}': no such file")
    try:
        context.load_cert_chain(str(cert), None if key is None else str(key))
    except (OSError, ssl.SSLError) as exc:
        raise InvalidArgumentError(
            f"{cert_flag} '{cert}'"
            + (f" and {key_flag} '{key}'" if key is not None else "")
            + f": not a PEM certificate and its private key ({_reason(exc)})"
        ) from None


def _read(path: Path | None, flag: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(f"{flag} '{path}': {exc.strerror or exc}") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def handshake_error(exc: ssl.SSLError, where: str, hint: str) -> PerfRequestError:
    """The error a failed TLS handshake with ``where`` (``host:port``) raises, in one line."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or _reason(exc)
        return PerfRequestError(f"the certificate of {where} was not accepted ({detail}): {hint}")
    return PerfRequestError(
        f"the TLS handshake with {where} failed ({_reason(exc)}): is the server serving TLS "
        "on this port?"
    )
