"""Opening one connection of the load generator's HTTP and gRPC clients, with one set of errors.

Both clients own their asyncio protocol (:mod:`inferd.tools.perf.http_client`'s HTTP/1.1
connection, :mod:`inferd.tools.perf.grpc_h2`'s HTTP/2 one); this opens a connection for either,
on TLS when given a context, and says in one line why it could not: a failed handshake as
:func:`inferd.client.tls.handshake_error` words it, any other failure as
``cannot connect to host:port over <protocol> (<reason>)``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import TypeVar

from inferd.client.tls import GrpcTlsSettings, HttpsSettings, handshake_error
from inferd.errors import PerfRequestError

__all__ = ["open_connection"]

P = TypeVar("P", bound=asyncio.BaseProtocol)


async def open_connection(
    protocol: Callable[[asyncio.AbstractEventLoop], P],
    host: str,
    port: int,
    *,
    context: ssl.SSLContext | None,
    tls: HttpsSettings | GrpcTlsSettings | None,
    over: str,
) -> tuple[asyncio.BaseTransport, P]:
    """A connection to ``host:port`` driven by ``protocol(loop)``, on TLS with ``context``
    (made from ``tls``) when given one; :class:`PerfRequestError` naming the server and the
    reason when it cannot be opened (``over`` names the protocol in that message)."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.create_connection(
            lambda: protocol(loop),
            host,
            port,
            ssl=context,
            server_hostname=None if context is None else host,
        )
    except ssl.SSLError as exc:
        assert tls is not None
        raise handshake_error(exc, f"{host}:{port}", tls.hint) from None
    except OSError as exc:
        raise PerfRequestError(
            f"cannot connect to {host}:{port} over {over} ({exc.strerror or exc})"
        ) from None
