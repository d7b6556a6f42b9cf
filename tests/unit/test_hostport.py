"""One ``HOST:PORT`` formatter for the servers and the client: IPv6 literals in brackets."""

from __future__ import annotations

import pytest

from inferd.client import format_host as client_format_host
from inferd.core.hostport import format_host


@pytest.mark.parametrize(
    ("host", "port", "shown"),
    [
        ("localhost", 8001, "localhost:8001"),
        ("0.0.0.0", 8001, "0.0.0.0:8001"),
        ("::", 8001, "[::]:8001"),
        ("::1", 0, "[::1]:0"),
        ("[::1]", 8001, "[::1]:8001"),  # already bracketed: not bracketed twice
        ("fe80::1", None, "[fe80::1]"),
        ("[fe80::1]", None, "[fe80::1]"),
        ("example.com", None, "example.com"),
    ],
)
def test_format_host(host: str, port: int | None, shown: str) -> None:
    assert format_host(host, port) == shown


def test_the_client_uses_the_same_formatter() -> None:
    assert client_format_host is format_host
