"""``HOST:PORT`` as an address is written: an IPv6 literal in brackets (``[::1]:8000``).

One pure formatter shared by the servers (the gRPC front end's listening address) and the
client side (:mod:`inferd.client.endpoint`, an HTTP ``Host`` header, perf's targets).
"""

from __future__ import annotations

__all__ = ["format_host"]


def format_host(host: str, port: int | None = None) -> str:
    """``host:port``, with an IPv6 address in brackets (``[::1]:8000``); a host already in
    brackets is kept as it is. Without a port, the host alone (bracketed if IPv6), as an HTTP
    ``Host`` header wants it with its port."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return shown if port is None else f"{shown}:{port}"
