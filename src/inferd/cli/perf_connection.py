"""perf_analyzer's flags for how a client reaches a server: extra headers (``-H``) and TLS
(``--ssl-https-*``, ``--ssl-grpc-*``), shared by ``inferd perf`` and ``inferd analyze``.

Each flag keeps perf_analyzer's name and meaning, and each is either carried out or refused
with what to do instead: an ``https://`` server (``-u https://HOST:PORT``) is what turns TLS on
for HTTP, ``--ssl-grpc-use-ssl`` for gRPC, and a TLS flag of the other protocol, or one given
while TLS is off, stops the command instead of being ignored.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from inferd.client.headers import Headers, check_grpc, parse_headers
from inferd.client.tls import GrpcTlsSettings, HttpsSettings
from inferd.errors import InvalidArgumentError
from inferd.tools.perf.metadata import is_https


@dataclass(frozen=True)
class Connection:
    """The headers sent with every request and the TLS of the chosen protocol (None: none)."""

    headers: Headers = ()
    https: HttpsSettings | None = None
    grpc_tls: GrpcTlsSettings | None = None


def _number(allowed: tuple[int, ...]) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if text.strip() not in tuple(str(a) for a in allowed):
            raise argparse.ArgumentTypeError(
                f"'{text}' is not one of {', '.join(str(a) for a in allowed)}"
            )
        return int(text)

    return parse


def _key_type(text: str) -> str:
    if text not in ("PEM", "DER"):
        raise argparse.ArgumentTypeError(f"'{text}' is not PEM or DER")
    return text


def add_connection_arguments(
    p: argparse.ArgumentParser, *, sent_with: str = "request", grpc: bool = True
) -> None:
    """``-H`` and the ``--ssl-*`` flags, in their own help group; ``sent_with`` says in the help
    what carries the headers. Without ``grpc`` (a command that speaks HTTP only) the
    ``--ssl-grpc-*`` flags are left out."""
    group = p.add_argument_group("headers and TLS (perf_analyzer's flags)")
    group.add_argument(
        "-H",
        dest="headers",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help=f"a header sent with every {sent_with}: HTTP header, or gRPC metadata (name in "
        "lower case); repeatable. E.g. a restricted API's KEY:VALUE",
    )
    group.add_argument(
        "--ssl-https-verify-peer",
        type=_number((0, 1)),
        metavar="0|1",
        help="HTTPS: check the server's certificate against the CA bundle (default 1)",
    )
    group.add_argument(
        "--ssl-https-verify-host",
        type=_number((0, 1, 2)),
        metavar="0|1|2",
        help="HTTPS: check that the certificate names the host; 1 and 2 both check, as in "
        "libcurl (default 2)",
    )
    group.add_argument(
        "--ssl-https-ca-certificates-file",
        type=Path,
        metavar="PEM",
        help="HTTPS: the CA bundle the server's certificate must chain to (default: the system's)",
    )
    group.add_argument(
        "--ssl-https-client-certificate-file",
        type=Path,
        metavar="PEM",
        help="HTTPS: a client certificate, for a server that asks for one (mutual TLS)",
    )
    group.add_argument(
        "--ssl-https-client-certificate-type",
        type=_key_type,
        metavar="PEM",
        help="the client certificate's format: PEM only (convert DER with openssl x509)",
    )
    group.add_argument(
        "--ssl-https-private-key-file",
        type=Path,
        metavar="PEM",
        help="HTTPS: the client certificate's private key (default: inside the certificate file)",
    )
    group.add_argument(
        "--ssl-https-private-key-type",
        type=_key_type,
        metavar="PEM",
        help="the private key's format: PEM only (convert DER with openssl pkey)",
    )
    if not grpc:
        p.set_defaults(
            ssl_grpc_use_ssl=None,
            ssl_grpc_root_certifications_file=None,
            ssl_grpc_private_key_file=None,
            ssl_grpc_certificate_chain_file=None,
        )
        return
    group.add_argument(
        "--ssl-grpc-use-ssl",
        action="store_true",
        default=None,
        help="gRPC over TLS (the server's certificate is checked against the host)",
    )
    group.add_argument(
        "--ssl-grpc-root-certifications-file",
        type=Path,
        metavar="PEM",
        help="gRPC TLS: the root certificates the server's must chain to (default: the system's)",
    )
    group.add_argument(
        "--ssl-grpc-private-key-file",
        type=Path,
        metavar="PEM",
        help="gRPC TLS: the client's private key, for mutual TLS",
    )
    group.add_argument(
        "--ssl-grpc-certificate-chain-file",
        type=Path,
        metavar="PEM",
        help="gRPC TLS: the client's certificate chain, for mutual TLS",
    )


def _https_given(args: argparse.Namespace) -> list[str]:
    values = {
        "--ssl-https-verify-peer": args.ssl_https_verify_peer,
        "--ssl-https-verify-host": args.ssl_https_verify_host,
        "--ssl-https-ca-certificates-file": args.ssl_https_ca_certificates_file,
        "--ssl-https-client-certificate-file": args.ssl_https_client_certificate_file,
        "--ssl-https-client-certificate-type": args.ssl_https_client_certificate_type,
        "--ssl-https-private-key-file": args.ssl_https_private_key_file,
        "--ssl-https-private-key-type": args.ssl_https_private_key_type,
    }
    return [flag for flag, value in values.items() if value is not None]


def _grpc_given(args: argparse.Namespace) -> list[str]:
    values = {
        "--ssl-grpc-use-ssl": args.ssl_grpc_use_ssl,
        "--ssl-grpc-root-certifications-file": args.ssl_grpc_root_certifications_file,
        "--ssl-grpc-private-key-file": args.ssl_grpc_private_key_file,
        "--ssl-grpc-certificate-chain-file": args.ssl_grpc_certificate_chain_file,
    }
    return [flag for flag, value in values.items() if value is not None]


def connection_from_args(args: argparse.Namespace, protocol: str, url: str | None) -> Connection:
    """Headers and TLS for ``protocol`` (http, grpc, in-process) and the server ``url``;
    InvalidArgumentError names the first flag that does not apply."""
    https_given = _https_given(args)
    grpc_given = _grpc_given(args)
    if protocol == "in-process":
        given = (["-H"] if args.headers else []) + https_given + grpc_given
        if given:
            raise InvalidArgumentError(
                f"{given[0]} is for a server over the network; with -i in-process no request "
                "leaves this process: leave it out"
            )
        return Connection()
    headers = parse_headers(args.headers)
    if protocol == "grpc":
        check_grpc(headers)
        if https_given:
            raise InvalidArgumentError(
                f"{https_given[0]} is for HTTPS (-i http with -u https://HOST:PORT); over gRPC "
                "use --ssl-grpc-use-ssl and the --ssl-grpc-* files"
            )
        if url is not None and is_https(url):
            raise InvalidArgumentError(
                "-u https:// names an HTTPS server; with -i grpc give -u HOST:PORT and "
                "--ssl-grpc-use-ssl"
            )
        return Connection(headers, grpc_tls=_grpc_tls(args, grpc_given))
    if grpc_given:
        raise InvalidArgumentError(
            f"{grpc_given[0]} is for -i grpc; for HTTP over TLS give -u https://HOST:PORT "
            "(and the --ssl-https-* flags)"
        )
    if url is None or not is_https(url):
        if https_given:
            raise InvalidArgumentError(
                f"{https_given[0]} applies to an HTTPS server: give -u https://HOST:PORT"
            )
        return Connection(headers)
    return Connection(headers, https=_https(args))


def _grpc_tls(args: argparse.Namespace, given: list[str]) -> GrpcTlsSettings | None:
    if not args.ssl_grpc_use_ssl:
        if given:
            raise InvalidArgumentError(f"{given[0]} needs --ssl-grpc-use-ssl (TLS is off)")
        return None
    return GrpcTlsSettings(
        root_file=args.ssl_grpc_root_certifications_file,
        key_file=args.ssl_grpc_private_key_file,
        chain_file=args.ssl_grpc_certificate_chain_file,
    )


def _https(args: argparse.Namespace) -> HttpsSettings:
    for kind, flag, convert in (
        (
            args.ssl_https_client_certificate_type,
            "--ssl-https-client-certificate-type",
            "openssl x509 -inform DER -in CERT -out CERT.pem",
        ),
        (
            args.ssl_https_private_key_type,
            "--ssl-https-private-key-type",
            "openssl pkey -inform DER -in KEY -out KEY.pem",
        ),
    ):
        if kind == "DER":
            raise InvalidArgumentError(
                f"{flag} DER is not supported: convert the file to PEM ({convert})"
            )
    cert, key = args.ssl_https_client_certificate_file, args.ssl_https_private_key_file
    if key is not None and cert is None:
        raise InvalidArgumentError(
            "--ssl-https-private-key-file needs --ssl-https-client-certificate-file"
        )
    peer = args.ssl_https_verify_peer
    host = args.ssl_https_verify_host
    return HttpsSettings(
        verify_peer=peer is None or peer == 1,
        verify_host=host is None or host > 0,
        ca_file=args.ssl_https_ca_certificates_file,
        cert_file=cert,
        key_file=key,
    )
