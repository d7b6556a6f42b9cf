"""Build, bind and stop the grpc.aio server that carries the inference service."""

from __future__ import annotations

import logging
from typing import Any

import grpc
from tritonclient.grpc import service_pb2_grpc

from inferd.engine import Engine
from inferd.errors import UnavailableError
from inferd.frontends.access import AccessPolicy
from inferd.frontends.grpc.servicer import GrpcInferenceServicer
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


def _address(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6 literal
    return f"{host}:{port}"


def _add_health_service(server: Any, engine: Engine, log: logging.Logger) -> bool:
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

        async def Watch(self, request: Any, context: Any) -> Any:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Watch is not supported")

    health_pb2_grpc.add_HealthServicer_to_server(_Health(), server)
    return True


async def start_grpc_server(
    engine: Engine,
    host: str,
    port: int,
    *,
    log: logging.Logger,
    max_stream_inflight: int = 1024,
    access: AccessPolicy | None = None,
    tls: TlsSettings | None = None,
) -> tuple[GrpcServer, int]:
    """Start serving on ``host:port`` (``port=0`` picks a free port); return the bound port."""
    server = grpc.aio.server(options=server_options())
    servicer = GrpcInferenceServicer(engine, log=log, max_stream_inflight=max_stream_inflight)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    _add_health_service(server, engine, log)
    address = _address(host, port)
    try:
        bound = int(server.add_insecure_port(address))
    except RuntimeError as exc:
        raise UnavailableError(f"cannot bind the gRPC server to {address}: {exc}") from exc
    if bound == 0:
        raise UnavailableError(f"cannot bind the gRPC server to {address}")
    await server.start()
    log.info("gRPC server listening on %s", _address(host, bound))
    return GrpcServer(server, bound), bound
