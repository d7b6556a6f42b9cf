"""Run an ASGI app with uvicorn (httptools parser) on the *current* event loop.

The caller owns the loop (uvloop in ``inferd serve``) and the signal handlers: this module never
calls ``uvicorn.Server.serve``, which would install its own. The listening socket is bound here,
so port 0 works and the bound port is known before the first request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from inferd.frontends.tls import TlsSettings

_log = logging.getLogger(__name__)


def _set_nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class NoDelayHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with ``TCP_NODELAY`` set explicitly on every connection.

    asyncio and uvloop already set it on TCP transports; setting it again costs one syscall per
    connection and removes the dependency on that detail. uvicorn writes the status line and
    headers, then the body, as two writes: without NODELAY the second one would wait for the
    client's delayed ACK (~40 ms per request).
    """

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        _set_nodelay(transport)


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
    max_connections: int | None = None,
    tls: TlsSettings | None = None,
    timeout_graceful_shutdown_s: int = 5,
    backlog: int = 2048,
) -> tuple[HttpServer, int]:
    """Serve ``app`` on ``host:port`` (0 = an ephemeral port); return the handle and the port."""
    sock = _bind(host, port, backlog)
    try:
        config = uvicorn.Config(
            app,
            host=host,
            port=sock.getsockname()[1],
            loop="none",
            http=NoDelayHttpToolsProtocol,
            ws="none",
            lifespan="off",
            interface="asgi3",
            access_log=False,
            log_config=None,
            log_level=log_level,
            proxy_headers=False,
            server_header=False,
            backlog=backlog,
            timeout_keep_alive=max(1, round(timeout_keep_alive_s)),
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
    _log.info("HTTP server listening on %s:%d", handle.host, handle.port)
    return handle, handle.port


__all__ = ["HttpServer", "NoDelayHttpToolsProtocol", "start_http_server"]
