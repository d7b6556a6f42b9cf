"""One front-end process: HTTP and gRPC on the server's ports, the engine behind a channel.

Started by :mod:`inferd.server.frontends.supervisor` as ``python -m
inferd.server.frontends.worker``. Its standard input carries its settings (a length-prefixed
JSON document, :mod:`.settings`, written by the parent process only) and then stays open: end
of file means the engine process has gone, and the front end stops. It prints ``ready`` on
standard output once it serves. Of the descriptors it inherits it keeps only what it uses:
its channel's doorbells (duplicated, the inherited ones closed) and the shared connection
table with the front ends' doorbells (:mod:`.connections`).

Inference requests are decoded here and sent to the engine as tensors; the responses are
encoded here. Every other request is answered by the engine's own HTTP app or gRPC servicer
(:mod:`.proxy`), so a front end holds no state of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
from tritonclient.grpc import service_pb2

from inferd.engine import Engine
from inferd.errors import InferdError
from inferd.frontends.grpc.errors import set_status, status_for
from inferd.frontends.grpc.handlers import (
    API_BY_METHOD,
    HEALTH_API_BY_METHOD,
    Undecodable,
    sees_undecodable,
    service_handler,
)
from inferd.frontends.grpc.server import server_credentials, server_options
from inferd.frontends.grpc.servicer import GrpcInferenceServicer
from inferd.frontends.http.app import HttpApp
from inferd.frontends.http.asgi import Receive, Scope, Send
from inferd.frontends.http.routes import Endpoint, match_route
from inferd.frontends.http.server import start_http_server
from inferd.server.config import ServerConfig
from inferd.server.frontends.channel import ChannelSpec
from inferd.server.frontends.connections import ConnectionTable
from inferd.server.frontends.link import MessageLink
from inferd.server.frontends.messages import Kind, decode_error, split_json
from inferd.server.frontends.proxy import EngineProxy
from inferd.server.frontends.settings import (
    LENGTH,
    Settings,
    SettingsError,
    frontend_config,
    local_infer,
)

__all__ = [
    "ForwardingApp",
    "FrontendHttpApp",
    "FrontendServicer",
    "Settings",
    "frontend_config",
    "local_infer",
    "main",
]

_SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
_STATUS = {code.value[0]: code for code in grpc.StatusCode}


class FrontendHttpApp:
    """Inference here; every other request answered by the engine's HTTP app."""

    def __init__(
        self, proxy: EngineProxy, config: ServerConfig, log: logging.Logger, local: bool
    ) -> None:
        self._proxy = proxy
        self._local: HttpApp | None = None
        if local:
            self._local = HttpApp(
                cast(Engine, proxy),  # the inference path uses infer() and tracing only
                max_body_bytes=config.http_max_input_bytes,
                max_json_body_bytes=config.http_max_json_input_bytes,
                access=config.http_access(),
                log=log,
            )
        self._max_body_bytes = max(config.http_max_input_bytes, config.openai_max_body_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if self._local is not None and scope["method"] == "POST" and _is_infer(scope):
            await self._local(scope, receive, send)
            return
        await self._proxy.forward_http(scope, receive, send, self._max_body_bytes)


class ForwardingApp:
    """Every request answered by the engine's app of this port (the /v1 port's)."""

    def __init__(self, proxy: EngineProxy, app: str, max_body_bytes: int) -> None:
        self._proxy = proxy
        self._app = app
        self._max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._proxy.forward_http(scope, receive, send, self._max_body_bytes, self._app)


def _is_infer(scope: Scope) -> bool:
    raw = scope.get("raw_path")
    known = _INFER_PATHS.get(raw) if raw else None
    if known is not None:
        return known
    path = raw.decode("latin-1") if raw else scope["path"]
    try:
        route = match_route(path.partition("?")[0], "POST")
    except InferdError:
        return False  # the engine's app gives the answer
    infer = route is not None and route.endpoint is Endpoint.MODEL_INFER
    if raw:
        if len(_INFER_PATHS) >= _INFER_PATHS_KEPT:
            _INFER_PATHS.clear()
        _INFER_PATHS[raw] = infer
    return infer


#: whether a raw path (query string included) is an inference route, for the paths seen last:
#: a client calls a few paths over and over, and matching one costs more than a lookup
_INFER_PATHS: dict[bytes, bool] = {}
_INFER_PATHS_KEPT = 256


class FrontendServicer(GrpcInferenceServicer):
    """ModelInfer here; every other unary call answered by the engine's servicer."""

    def __init__(self, proxy: EngineProxy, *, log: logging.Logger, local: bool) -> None:
        super().__init__(cast(Engine, proxy), log=log)
        self._proxy = proxy
        self._local = local
        self._flog = log

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        if self._local:
            return await super().ModelInfer(request, context)
        return await self.forward("ModelInfer", request, context)

    async def ModelStreamInfer(self, request_iterator: Any, context: Any) -> Any:
        """The engine's servicer answers the stream; its messages pass through as they come."""

        async def requests() -> AsyncIterator[tuple[bytes, str | None]]:
            async for msg in request_iterator:
                if isinstance(msg, Undecodable):
                    yield b"", msg.message
                else:
                    yield msg.SerializeToString(), None

        replies = self._proxy.grpc_stream(_metadata(context), requests())
        async with contextlib.aclosing(replies):
            async for message in replies:
                if message.kind is Kind.STREAM_OUT:
                    yield service_pb2.ModelStreamInferResponse.FromString(bytes(message.body))
                elif message.kind is Kind.GRPC_REPLY:
                    head, _ = split_json(message.body)
                    if head["code"] is not None:
                        set_status(context, _STATUS[head["code"]], head["details"])
                    return
                else:
                    error = decode_error(message.body)
                    set_status(context, *status_for(error, log=self._flog, request_id="stream"))
                    return

    async def forward(self, method: str, request: Any, context: Any) -> Any:
        try:
            if isinstance(request, Undecodable):  # for a call that answers it itself
                code, details, data = await self._proxy.forward_grpc(
                    method, b"", _metadata(context), undecodable=request.message
                )
            else:
                code, details, data = await self._proxy.forward_grpc(
                    method, request.SerializeToString(), _metadata(context)
                )
        except InferdError as exc:
            status, message = status_for(exc, log=self._flog, request_id=method)
            set_status(context, status, message)
            return None
        if code is not None:
            set_status(context, _STATUS[code], details)
            return None
        return getattr(service_pb2, _SERVICE.methods_by_name[method].output_type.name).FromString(
            data
        )


def _metadata(context: Any) -> list[tuple[str, str]]:
    """The call's metadata (text values: binary ones play no part in the servicer)."""
    return [(k, v) for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)]


def _forwarder(method: str) -> Any:
    async def call(self: FrontendServicer, request: Any, context: Any) -> Any:
        return await self.forward(method, request, context)

    call.__name__ = method
    base = getattr(GrpcInferenceServicer, method, None)
    if getattr(base, "sees_undecodable", False):  # as the engine's servicer, which answers
        sees_undecodable(call)
    return call


for _method in _SERVICE.methods:
    if _method.name not in ("ModelInfer", "ModelStreamInfer"):
        setattr(FrontendServicer, _method.name, _forwarder(_method.name))


def _add_health(server: Any, servicer: FrontendServicer, config: ServerConfig) -> None:
    """``grpc.health.v1.Health``: SERVING iff the engine says it is ready."""
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc
    except Exception:  # not installed (or unusable): the single process serves none either
        return

    class _Health(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
        async def Check(self, request: Any, context: Any) -> Any:
            ready = await servicer.forward("ServerReady", service_pb2.ServerReadyRequest(), context)
            status = health_pb2.HealthCheckResponse.NOT_SERVING
            if ready is not None and ready.ready:
                status = health_pb2.HealthCheckResponse.SERVING
            return health_pb2.HealthCheckResponse(status=status)

        async def Watch(self, request: Any, context: Any) -> Any:
            set_status(context, grpc.StatusCode.UNIMPLEMENTED, "Watch is not supported")
            return
            yield

    server.add_generic_rpc_handlers(
        (
            service_handler(
                health_pb2, "Health", _Health(), HEALTH_API_BY_METHOD, config.grpc_access()
            ),
        )
    )


async def _start_grpc(proxy: EngineProxy, settings: Settings, log: logging.Logger) -> Any:
    config = settings.config
    assert settings.grpc_port is not None
    # the port is shared with the other front ends on purpose (the engine process holds it)
    options = [o for o in server_options() if o[0] != "grpc.so_reuseport"]
    server = grpc.aio.server(options=[*options, ("grpc.so_reuseport", 1)])
    servicer = FrontendServicer(proxy, log=log, local=settings.local_infer)
    server.add_generic_rpc_handlers(
        (
            service_handler(
                service_pb2, "GRPCInferenceService", servicer, API_BY_METHOD, config.grpc_access()
            ),
        )
    )
    _add_health(server, servicer, config)
    address = f"{config.grpc_address}:{settings.grpc_port}"
    if ":" in config.grpc_address:
        address = f"[{config.grpc_address}]:{settings.grpc_port}"
    if config.grpc_tls is None:
        bound = server.add_insecure_port(address)
    else:
        bound = server.add_secure_port(address, server_credentials(config.grpc_tls))
    if bound != settings.grpc_port:
        raise OSError(f"cannot bind the gRPC port {address}")
    await server.start()
    return server


async def serve(settings: Settings) -> int:
    config = settings.config
    log = logging.getLogger(f"inferd.frontend.{settings.index}")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # the engine holds the other end of standard input: end of file means it has gone
    loop.add_reader(0, lambda: stop.set() if not os.read(0, 4096) else None)
    spec = ChannelSpec.from_dict(settings.channel)
    try:
        channel = spec.open()
    finally:
        spec.close()  # the inherited descriptors: the channel holds its own copies
    table = ConnectionTable.attach(settings.connection_fds, settings.index)
    table.watch(loop)
    proxy = EngineProxy(MessageLink(channel, settings.slot_bytes), log=log)
    reader = loop.create_task(proxy.run())
    reader.add_done_callback(lambda _: stop.set())
    http = grpc_server = openai = None
    try:
        if settings.http_port is not None:
            http, _ = await start_http_server(
                FrontendHttpApp(
                    proxy, config, logging.getLogger("inferd.http"), settings.local_infer
                ),
                config.http_address,
                settings.http_port,
                timeout_keep_alive_s=config.http_idle_timeout_s,
                header_timeout_s=config.http_header_timeout_s,
                body_timeout_s=config.http_body_timeout_s,
                max_connections=config.http_max_connections,
                tls=config.http_tls,
                reuse_port=True,
                shared_count=table.port("http"),
            )
        if settings.openai_port is not None:
            openai, _ = await start_http_server(
                ForwardingApp(proxy, "openai", config.openai_max_body_bytes),
                config.http_address,
                settings.openai_port,
                timeout_keep_alive_s=config.http_idle_timeout_s,
                header_timeout_s=config.http_header_timeout_s,
                body_timeout_s=config.http_body_timeout_s,
                max_connections=config.http_max_connections,
                tls=config.http_tls,
                reuse_port=True,
                shared_count=table.port("openai"),
            )
        if settings.grpc_port is not None:
            grpc_server = await _start_grpc(proxy, settings, logging.getLogger("inferd.grpc"))
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await stop.wait()
    finally:
        grace = config.exit_timeout_secs
        if http is not None:
            await http.stop(grace)
        if openai is not None:
            await openai.stop(grace)
        if grpc_server is not None:
            await grpc_server.stop(grace)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        loop.remove_reader(0)
        channel.close()
        table.close()
    return 0


def _read_settings() -> Settings:
    stream = sys.stdin.buffer
    head = stream.read(LENGTH.size)
    if len(head) != LENGTH.size:
        raise SystemExit("inferd front end: no settings on standard input (started by hand?)")
    (length,) = LENGTH.unpack(head)
    try:
        return Settings.from_json(stream.read(length))
    except SettingsError as exc:
        raise SystemExit(f"inferd front end: {exc}") from None


def main() -> int:
    settings = _read_settings()
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s %(levelname).1s %(name)s[frontend {settings.index}]: %(message)s",
        stream=sys.stderr,
    )
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(settings))
    return uvloop.run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())
