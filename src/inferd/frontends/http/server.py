"""Run an ASGI app with uvicorn (httptools parser) on the *current* event loop.

The caller owns the loop (uvloop in ``inferd serve``) and the signal handlers: this module never
calls ``uvicorn.Server.serve``, which would install its own. The listening socket is bound here,
so port 0 works and the bound port is known before the first request. Header and idle
timeouts and the connection limit, which never starves health probes, are enforced by the
connection protocol (``protocol.py``, ``slots.py``);
TLS, when configured, wraps every connection (``tls.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

import uvicorn

from inferd.frontends.http.protocol import ConnectionLimits, protocol_class
from inferd.frontends.http.slots import PROBE_HEAD_TIMEOUT_S, PROBE_SLOTS
from inferd.frontends.http.tls import server_ssl_context
from inferd.frontends.tls import TlsSettings

_log = logging.getLogger(__name__)


def _bind(host: str, port: int, backlog: int) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class HttpServer:
    """Handle of a running HTTP server; ``await stop()`` shuts it down gracefully."""

    def __init__(
        self, server: uvicorn.Server, sock: socket.socket, ticker: asyncio.Task[None]
    ) -> None:
        self._server = server
        self._sock = sock
        self._ticker = ticker
        self._stopped = False
        address = sock.getsockname()
        self.host: str = address[0]
        self.port: int = address[1]

    @property
    def connections(self) -> set[Any]:
        """Open connections (uvicorn protocol objects); for diagnostics and tests."""
        return set(self._server.server_state.connections)

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish for up to ``grace_s`` seconds (default:
        the server's ``timeout_graceful_shutdown_s``), close idle keep-alive connections."""
        if self._stopped:
            return
        self._stopped = True
        if grace_s is not None:
            self._server.config.timeout_graceful_shutdown = max(0.0, grace_s)  # type: ignore[assignment]
        self._server.should_exit = True
        await self._ticker
        await self._server.shutdown(sockets=[self._sock])


async def start_http_server(
    app: Any,
    host: str,
    port: int,
    *,
    log_level: str = "warning",
    timeout_keep_alive_s: float = 75,
    header_timeout_s: float = 10.0,
    body_timeout_s: float = 30.0,
    max_connections: int | None = None,
    probe_slots: int = PROBE_SLOTS,
    probe_head_timeout_s: float = PROBE_HEAD_TIMEOUT_S,
    tls: TlsSettings | None = None,
    timeout_graceful_shutdown_s: int = 5,
    backlog: int = 2048,
) -> tuple[HttpServer, int]:
    """Serve ``app`` on ``host:port`` (0 = an ephemeral port); return the handle and the port.

    ``max_connections`` bounds the open connections (None: unbounded); at the limit, up to
    ``probe_slots`` more may each get one health answer, their request head due within
    ``probe_head_timeout_s`` (:mod:`inferd.frontends.http.slots`); ``tls`` serves HTTPS.
    """
    limits = ConnectionLimits(
        header_timeout_s,
        timeout_keep_alive_s,
        max_connections,
        body_timeout_s=body_timeout_s,
        probe_slots=probe_slots,
        probe_head_timeout_s=probe_head_timeout_s,
    )
    context = server_ssl_context(tls) if tls is not None else None
    sock = _bind(host, port, backlog)
    try:
        config = uvicorn.Config(
            app,
            host=host,
            port=sock.getsockname()[1],
            loop="none",
            http=protocol_class(limits),
            ws="none",
            lifespan="off",
            interface="asgi3",
            access_log=False,
            log_config=None,
            log_level=log_level,
            proxy_headers=False,
            server_header=False,
            backlog=backlog,
            timeout_keep_alive=max(1, round(timeout_keep_alive_s)),  # the protocol: exact value
            ssl_context_factory=None if context is None else (lambda _config, _default: context),
            timeout_graceful_shutdown=timeout_graceful_shutdown_s,
        )
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])
    except BaseException:
        sock.close()
        raise
    # uvicorn's tick loop refreshes the Date header and watches should_exit; the handle owns it.
    ticker = asyncio.get_running_loop().create_task(server.main_loop(), name="inferd-http-tick")
    handle = HttpServer(server, sock, ticker)
    _log.info(
        "HTTP server listening on %s:%d%s", handle.host, handle.port, " (TLS)" if context else ""
    )
    return handle, handle.port


__all__ = ["HttpServer", "start_http_server"]
