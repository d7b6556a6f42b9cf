"""Where a server is and how to reach it: one :class:`Endpoint` (URL, TLS, headers, token) used by
every tool and command that talks to a server, and the ``HOST:PORT`` rules they share.

``-u`` takes perf_analyzer's form, ``host[:port]`` with an optional ``http://``, ``https://`` or
``grpc://``; an IPv6 address is written in brackets (``[::1]:8000``), and
:func:`format_host` (:mod:`inferd.core.hostport`, shared with the servers) writes it back
that way.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferd.client.headers import Headers
from inferd.client.tls import HttpsSettings
from inferd.core.hostport import format_host
from inferd.errors import InvalidArgumentError

__all__ = ["Endpoint", "format_host", "is_https", "split_url"]


def split_url(url: str, default_port: int) -> tuple[str, int]:
    """``host[:port]`` (perf_analyzer's ``-u``; a leading ``http://``, ``https://`` or
    ``grpc://`` is allowed) as ``(host, port)``."""
    text = url.strip()
    for scheme in ("http://", "https://", "grpc://"):
        if text.startswith(scheme):
            text = text[len(scheme) :]
    text = text.rstrip("/")
    if "/" in text:
        raise InvalidArgumentError(f"-u {url}: expected HOST:PORT, without a path")
    host, port = text, default_port
    if text.startswith("["):  # [::1]:8000
        close = text.find("]")
        if close < 0:
            raise InvalidArgumentError(f"-u {url}: unclosed '[' in the address")
        host, rest = text[1:close], text[close + 1 :]
        if rest:
            port = _port(rest.removeprefix(":"), url)
    elif text.count(":") == 1:
        host, _, number = text.partition(":")
        port = _port(number, url)
    if not host:
        raise InvalidArgumentError(f"-u {url}: no host")
    return host, port


def is_https(url: str) -> bool:
    """Whether ``-u`` names an HTTPS server (``https://HOST:PORT``)."""
    return url.strip().lower().startswith("https://")


def _port(text: str, url: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise InvalidArgumentError(f"-u {url}: '{text}' is not a port number")
    return int(text)


@dataclass(frozen=True)
class Endpoint:
    """One server's HTTP address with what every call to it carries: the extra headers (a
    restricted API's ``KEY: VALUE``), the bearer token (``Authorization: Bearer ...``) and, for
    an HTTPS server, its TLS settings."""

    host: str
    port: int
    tls: HttpsSettings | None = None
    headers: Headers = ()
    token: str | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        default_port: int = 8000,
        tls: HttpsSettings | None = None,
        headers: Headers = (),
        token: str | None = None,
    ) -> Endpoint:
        """The endpoint ``-u URL`` names; an ``https://`` URL without TLS settings gets the
        defaults (the system's certificate authorities, host checked)."""
        host, port = split_url(url, default_port)
        if tls is None and is_https(url):
            tls = HttpsSettings()
        if token is not None and any(name.lower() == "authorization" for name, _ in headers):
            raise InvalidArgumentError(
                "-H Authorization and the admin token would both be sent: give one"
            )
        return cls(host, port, tls, headers, token)

    @property
    def address(self) -> str:
        """``host:port`` (an IPv6 host in brackets)."""
        return format_host(self.host, self.port)

    @property
    def base_url(self) -> str:
        """``http://host:port`` or ``https://host:port``."""
        return f"{'http' if self.tls is None else 'https'}://{self.address}"

    def all_headers(self) -> Headers:
        """The extra headers, then ``Authorization: Bearer <token>`` when there is a token."""
        if self.token is None:
            return self.headers
        return (*self.headers, ("Authorization", f"Bearer {self.token}"))
