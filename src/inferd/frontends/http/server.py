"""Serve an ASGI 3 app over HTTP/1.1 on the *current* event loop, with inferd's own connection
protocol (:mod:`.connection`, on httptools' parser) and asyncio's ``loop.create_server``.

The caller owns the loop (uvloop in ``inferd serve``) and the signal handlers. The listening
socket is bound here, so port 0 works and the bound port is known before the first request.
Header, body and idle timeouts and the connection limit, which never starves health probes, are
enforced by the connection protocol (``connection.py``, ``slots.py``); TLS, when configured,
wraps every connection (``tls.py``). :meth:`HttpServer.stop` stops gracefully: it stops
accepting, closes idle connections, lets responses in flight finish within a grace period, then
cancels what remains and closes every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from inferd.frontends.http.connection import ConnectionLimits, HttpConnection, ServerState
from inferd.frontends.http.slots import PROBE_HEAD_TIMEOUT_S, PROBE_SLOTS, SharedCount
from inferd.frontends.http.tls import server_ssl_context
from inferd.frontends.tls import TlsSettings

_log = logging.getLogger(__name__)


def _bind(host: str, port: int, backlog: int, reuse_port: bool = False) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # front-end processes share the port (the kernel spreads connections)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
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
        self, server: asyncio.Server, sock: socket.socket, state: ServerState, grace_s: float
    ) -> None:
        self._server = server
        self._state = state
        self._grace_s = grace_s
        self._stopped = False
        address = sock.getsockname()
        self.host: str = address[0]
        self.port: int = address[1]

    @property
    def connections(self) -> set[HttpConnection]:
        """Open connections (refused ones and probe slots' refusals excluded); for diagnostics
        and tests."""
        return set(self._state.connections)

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop accepting, close idle keep-alive connections, let in-flight responses finish for
        up to ``grace_s`` seconds (default: the server's ``timeout_graceful_shutdown_s``), then
        cancel what is still running and close every connection."""
        if self._stopped:
            return
        self._stopped = True
        grace = self._grace_s if grace_s is None else max(0.0, grace_s)
        state = self._state
        state.stopping = True
        self._server.close()  # no new connections; the listening socket is closed
        for connection in list(state.connections):
            connection.shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while state.tasks and loop.time() < deadline:
            await asyncio.wait(set(state.tasks), timeout=deadline - loop.time())
        for task in list(state.tasks):
            task.cancel()
        for connection in list(state.connections):
            connection.transport.close()
        if state.tasks:
            await asyncio.wait(set(state.tasks), timeout=1.0)
        await asyncio.sleep(0)  # let the transports' connection_lost callbacks run


async def start_http_server(
    app: Any,
    host: str,
    port: int,
    *,
    timeout_keep_alive_s: float = 75,
    header_timeout_s: float = 10.0,
    body_timeout_s: float = 30.0,
    max_connections: int | None = None,
    probe_slots: int = PROBE_SLOTS,
    probe_head_timeout_s: float = PROBE_HEAD_TIMEOUT_S,
    tls: TlsSettings | None = None,
    timeout_graceful_shutdown_s: int = 5,
    backlog: int = 2048,
    reuse_port: bool = False,
    shared_count: SharedCount | None = None,
) -> tuple[HttpServer, int]:
    """Serve ``app`` on ``host:port`` (0 = an ephemeral port); return the handle and the port.

    ``max_connections`` bounds the open connections (None: unbounded); at the limit, up to
    ``probe_slots`` more may each get one health answer, their request head due within
    ``probe_head_timeout_s`` (:mod:`inferd.frontends.http.slots`); ``tls`` serves HTTPS;
    ``reuse_port`` lets other processes of this user listen on the same port (SO_REUSEPORT);
    ``shared_count``, the count those processes share, makes ``max_connections`` one limit for
    all of them (:class:`~inferd.frontends.http.slots.SharedCount`).
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
    state = ServerState(app, limits, shared_count)
    loop = asyncio.get_running_loop()
    sock = _bind(host, port, backlog, reuse_port)
    try:
        server = await loop.create_server(
            lambda: HttpConnection(state, loop), sock=sock, ssl=context, backlog=backlog
        )
    except BaseException:
        sock.close()
        raise
    handle = HttpServer(server, sock, state, float(timeout_graceful_shutdown_s))
    _log.info(
        "HTTP server listening on %s:%d%s", handle.host, handle.port, " (TLS)" if context else ""
    )
    return handle, handle.port


__all__ = ["HttpServer", "start_http_server"]
