"""Extra request headers (perf_analyzer's ``-H NAME:VALUE``), checked and encoded once.

Every header given is sent with every request: as HTTP header lines over HTTP, as call metadata
over gRPC (names in lower case, as gRPC requires). They are parsed and checked here before any
load, and each transport encodes them once into the bytes it prepares, so a request costs nothing
more for carrying them.

Names must be HTTP tokens; values printable ASCII (no CR, LF or other control characters, which
could end a header early). The headers that frame a request (``Host``, ``Content-Length``...)
belong to the transport and are refused, as are gRPC's own (``grpc-*``, ``te``) and binary
(``-bin``) metadata on gRPC.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence

from inferd.errors import InvalidArgumentError

Headers = tuple[tuple[str, str], ...]  # (name as given, value), in the order given

# RFC 9110 token characters
_TOKEN = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")
_PRINTABLE = frozenset(chr(c) for c in range(0x20, 0x7F))
# set by the transports themselves: another value would break the request's framing
_FRAMING = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "upgrade",
        "expect",
        "te",
        "trailer",
        "inference-header-content-length",
    }
)


def parse_header(text: str, *, flag: str = "-H") -> tuple[str, str]:
    """``NAME:VALUE`` as ``(name, value)``: the value is what follows the first colon, without
    surrounding spaces. Raise :class:`InvalidArgumentError` naming what is wrong."""
    name, colon, value = text.partition(":")
    if not colon or not name:
        raise InvalidArgumentError(f"{flag} '{text}': expected NAME:VALUE")
    bad = sorted({c for c in name if c not in _TOKEN})
    if bad:
        raise InvalidArgumentError(
            f"{flag} '{text}': the header name '{name}' holds {_shown(bad)}; a name is letters, "
            "digits and !#$%&'*+-.^_`|~ only"
        )
    value = value.strip(" ")
    if any(c not in _PRINTABLE for c in value):
        raise InvalidArgumentError(
            f"{flag} {name}: the value must be printable ASCII, without CR, LF or other control "
            "characters"
        )
    if name.lower() in _FRAMING:
        raise InvalidArgumentError(
            f"{flag} {name}: the load generator sets this header itself; leave it out"
        )
    return name, value


def parse_headers(texts: Iterable[str], *, flag: str = "-H") -> Headers:
    """Every ``-H`` in the order given; a name given twice (in any case) is refused."""
    headers: list[tuple[str, str]] = []
    seen: set[str] = set()
    for text in texts:
        name, value = parse_header(text, flag=flag)
        if name.lower() in seen:
            raise InvalidArgumentError(f"{flag} {name} is given twice: give each header once")
        seen.add(name.lower())
        headers.append((name, value))
    return tuple(headers)


def check_grpc(headers: Headers, *, flag: str = "-H") -> None:
    """Refuse the headers gRPC metadata cannot carry as given."""
    for name, _ in headers:
        lower = name.lower()
        if lower.startswith("grpc-"):
            raise InvalidArgumentError(f"{flag} {name}: names starting with grpc- are gRPC's own")
        if lower.endswith("-bin"):
            raise InvalidArgumentError(
                f"{flag} {name}: binary (-bin) metadata is not supported; use a text header"
            )


def http_lines(headers: Headers) -> bytes:
    """The header lines of an HTTP/1.1 request, each ending with CRLF."""
    return b"".join(f"{name}: {value}\r\n".encode("ascii") for name, value in headers)


def grpc_metadata(headers: Headers) -> tuple[tuple[str, str], ...]:
    """The headers as gRPC call metadata: names in lower case."""
    check_grpc(headers)
    return tuple((name.lower(), value) for name, value in headers)


def names(headers: Headers) -> list[str]:
    """The names only (for reports: values may be secrets)."""
    return [name for name, _ in headers]


def _shown(chars: Sequence[str]) -> str:
    return ", ".join(repr(c) for c in chars)


__all__ = [
    "Headers",
    "check_grpc",
    "grpc_metadata",
    "http_lines",
    "names",
    "parse_header",
    "parse_headers",
]
