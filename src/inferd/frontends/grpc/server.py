"""Build, bind and stop the grpc.aio server that carries the inference service."""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from typing import Any

import grpc
from tritonclient.grpc import service_pb2

from inferd.core.hostport import format_host
from inferd.engine import Engine
from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.frontends.access import AccessPolicy
from inferd.frontends.grpc.errors import set_status
from inferd.frontends.grpc.handlers import API_BY_METHOD, HEALTH_API_BY_METHOD, service_handler
from inferd.frontends.grpc.servicer import GrpcInferenceServicer
from inferd.frontends.shared_memory import SharedMemoryRegistry
from inferd.frontends.tls import TlsSettings

__all__ = ["GrpcServer", "server_options", "start_grpc_server"]

MAX_MESSAGE_BYTES = 2**31 - 1  # tritonclient and perf_analyzer set INT32_MAX on their side


def server_options() -> list[tuple[str, int]]:
    """Channel arguments matching Triton's defaults (PROTOCOL.md §4.5)."""
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 7_200_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 2),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 300_000),
        ("grpc.http2.max_ping_strikes", 2),
        # never share the port with another process by accident (Triton: --reuse-grpc-port=false)
        ("grpc.so_reuseport", 0),
    ]


class GrpcServer:
    """A started gRPC front end; ``port`` is the port actually bound."""

    def __init__(self, server: Any, port: int) -> None:
        self._server = server
        self.port = port

    @property
    def server(self) -> Any:
        """The underlying ``grpc.aio.Server``."""
        return self._server

    async def stop(self, grace_s: float | None) -> None:
        """Refuse new RPCs, let running ones finish for ``grace_s`` seconds, then cancel them."""
        await self._server.stop(grace_s)

    async def wait_for_termination(self) -> None:
        await self._server.wait_for_termination()


def _add_health_service(
    server: Any, engine: Engine, log: logging.Logger, access: AccessPolicy
) -> bool:
    """Register ``grpc.health.v1.Health`` when grpcio-health-checking is installed."""
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc
    except ImportError:
        log.debug("grpcio-health-checking is not installed: no grpc.health.v1 service")
        return False
    except Exception as exc:  # e.g. generated for a newer protobuf than tritonclient allows
        log.warning("grpcio-health-checking cannot be used (%s): no grpc.health.v1 service", exc)
        return False

    class _Health(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
        """SERVING iff the server is ready (as Triton does)."""

        async def Check(self, request: Any, context: Any) -> Any:
            status = (
                health_pb2.HealthCheckResponse.SERVING
                if engine.is_ready()
                else health_pb2.HealthCheckResponse.NOT_SERVING
            )
            return health_pb2.HealthCheckResponse(status=status)

        async def Watch(self, request: Any, context: Any) -> AsyncIterator[Any]:
            set_status(context, grpc.StatusCode.UNIMPLEMENTED, "Watch is not supported")
            return
            yield  # a server-streaming RPC is an async generator; this one sends nothing

    server.add_generic_rpc_handlers(
        (service_handler(health_pb2, "Health", _Health(), HEALTH_API_BY_METHOD, access),)
    )
    return True


def server_credentials(tls: TlsSettings) -> grpc.ServerCredentials:
    """TLS credentials from the configured files; unusable files are refused naming them."""
    cert, key, root = tls.read()
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # grpc checks the files only at handshake
    try:
        probe.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidArgumentError(
            f"cannot use the TLS certificate '{tls.cert_file}' with the key '{tls.key_file}': {exc}"
        ) from exc
    if root is not None:
        try:
            probe.load_verify_locations(cadata=root.decode("ascii", "replace"))
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise InvalidArgumentError(
                f"cannot use the TLS root certificate '{tls.root_cert_file}': {exc}"
            ) from exc
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=root, require_client_auth=tls.require_client_cert
    )


async def start_grpc_server(
    engine: Engine,
    host: str,
    port: int,
    *,
    log: logging.Logger,
    max_stream_inflight: int = 1024,
    max_stream_responses: int = 1024,
    access: AccessPolicy | None = None,
    tls: TlsSettings | None = None,
    shared_memory: SharedMemoryRegistry | None = None,
) -> tuple[GrpcServer, int]:
    """Start serving on ``host:port`` (``port=0`` picks a free port); return the bound port.

    ``access`` decides who may call which RPC (default: everyone); ``tls`` serves over TLS,
    mutual when it asks for client certificates; ``shared_memory`` is the server's registry of
    client regions (default: the extension is off).
    """
    access = AccessPolicy() if access is None else access
    credentials = None if tls is None else server_credentials(tls)
    server = grpc.aio.server(options=server_options())
    servicer = GrpcInferenceServicer(
        engine,
        log=log,
        max_stream_inflight=max_stream_inflight,
        max_stream_responses=max_stream_responses,
        shared_memory=shared_memory,
    )
    server.add_generic_rpc_handlers(
        (service_handler(service_pb2, "GRPCInferenceService", servicer, API_BY_METHOD, access),)
    )
    _add_health_service(server, engine, log, access)
    address = format_host(host, port)
    try:
        if credentials is None:
            bound = int(server.add_insecure_port(address))
        else:
            bound = int(server.add_secure_port(address, credentials))
    except RuntimeError as exc:
        raise UnavailableError(f"cannot bind the gRPC server to {address}: {exc}") from exc
    if bound == 0:
        raise UnavailableError(f"cannot bind the gRPC server to {address}")
    await server.start()
    log.info(
        "gRPC server listening on %s%s",
        format_host(host, bound),
        "" if tls is None else (" (mutual TLS)" if tls.require_client_cert else " (TLS)"),
    )
    return GrpcServer(server, bound), bound
