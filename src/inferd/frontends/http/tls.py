"""The server-side TLS context of the HTTP front end, built from :class:`TlsSettings`."""

from __future__ import annotations

import ssl

from inferd.errors import InvalidArgumentError
from inferd.frontends.tls import TlsSettings


def server_ssl_context(settings: TlsSettings) -> ssl.SSLContext:
    """A TLS 1.2+ server context; with mutual TLS, clients must present a certificate that
    chains to the root certificate. A root certificate without mutual TLS verifies the client
    certificates that are presented, without requiring one.

    Unreadable or mismatched files raise :class:`InvalidArgumentError` naming the file.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.cert_file, settings.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidArgumentError(
            f"cannot use the TLS certificate '{settings.cert_file}' with the key "
            f"'{settings.key_file}': {exc}"
        ) from exc
    if settings.root_cert_file is not None:
        try:
            context.load_verify_locations(cafile=settings.root_cert_file)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgumentError(
                f"cannot use the TLS root certificate '{settings.root_cert_file}': {exc}"
            ) from exc
        context.verify_mode = (
            ssl.CERT_REQUIRED if settings.require_client_cert else ssl.CERT_OPTIONAL
        )
    return context


__all__ = ["server_ssl_context"]
