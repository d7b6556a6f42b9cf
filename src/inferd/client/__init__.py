"""Talking to a running server: one :class:`Endpoint` (URL, TLS, headers, token), the admin
client over the model-control HTTP API, and the ``HOST:PORT`` rules every tool and command
shares. Errors come from :mod:`inferd.errors` (``ServerUnreachableError``,
``ServerUnauthenticatedError``, ``ServerPermissionDeniedError``, ``RepositoryCallError``)."""

from __future__ import annotations

from inferd.client.admin import AdminClient, access_message
from inferd.client.endpoint import Endpoint, format_host, is_https, split_url
from inferd.client.headers import Headers, parse_headers
from inferd.client.tls import GrpcTlsSettings, HttpsSettings

__all__ = [
    "AdminClient",
    "Endpoint",
    "GrpcTlsSettings",
    "Headers",
    "HttpsSettings",
    "access_message",
    "format_host",
    "is_https",
    "parse_headers",
    "split_url",
]
