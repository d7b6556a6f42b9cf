"""The KServe v2 / Triton gRPC front end (grpc.aio) over :class:`inferd.engine.Engine`."""

from inferd.frontends.grpc.errors import STATUS_BY_CODE
from inferd.frontends.grpc.server import GrpcServer, start_grpc_server
from inferd.frontends.grpc.servicer import GrpcInferenceServicer

__all__ = ["STATUS_BY_CODE", "GrpcInferenceServicer", "GrpcServer", "start_grpc_server"]
