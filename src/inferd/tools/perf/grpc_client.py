"""The load generator over gRPC: ``grpc`` (unary ``ModelInfer``) and ``grpc-stream``
(``ModelStreamInfer``, one bidirectional stream per channel).

Every ``ModelInferRequest`` is serialised once in :meth:`GrpcTransport.prepare`. Calls and
streams go over the lean HTTP/2 client of :mod:`inferd.tools.perf.grpc_h2` (grpcio's asyncio
client spends several times more CPU per request): a unary call does no protobuf work at all (an
error answer is a gRPC status, whose message is the server's); a stream parses each response to
match it to its request. The model's metadata, configuration and statistics, read a few times
per run, go through grpcio. What changes from
call to call (a stream request's id, a sequence's flags) is appended as a second serialised
message: protobuf merges concatenated messages field by field, so the server reads one request
with those fields set, and the prepared bytes are never rebuilt.

Extra headers (``-H``) travel as call metadata: in the header block each call sends (built once)
and on the grpcio calls. With :class:`~inferd.client.tls.GrpcTlsSettings` both the HTTP/2
connections (ALPN ``h2``) and the grpcio channel use TLS.

On a stream, responses are matched to the request by id. A decoupled model's request is done when
the response flagged ``triton_final_response`` arrives (asked for with
``triton_enable_empty_final_response``, so a model that ends with the flag alone still says so).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from typing import Any

import grpc
import numpy as np
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from inferd.client.endpoint import format_host
from inferd.client.headers import Headers, grpc_metadata
from inferd.client.tls import GrpcTlsSettings
from inferd.errors import InvalidArgumentError, PerfAccessError, PerfRequestError
from inferd.tools.perf import metadata
from inferd.tools.perf.connect import open_connection
from inferd.tools.perf.grpc_h2 import Http2Connection, grpc_message, request_headers
from inferd.tools.perf.inputs import batch_tensors
from inferd.tools.perf.payload import datatype_of, raw_bytes
from inferd.tools.perf.transport import ModelInfo, RequestData, SequenceFlags

DEFAULT_GRPC_PORT = 8001
SERVICE = "/inference.GRPCInferenceService/"
FINAL_RESPONSE = "triton_final_response"
ENABLE_EMPTY_FINAL = "triton_enable_empty_final_response"
# clients and servers of the v2 protocol allow messages of any size (perf_analyzer: INT32_MAX)
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
]
_REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


def call_suffix(request_id: str | None, sequence: SequenceFlags | None) -> bytes:
    """The serialised fields one call adds to a prepared request: its id, its sequence flags."""
    if request_id is None and sequence is None:
        return b""
    extra = service_pb2.ModelInferRequest(id=request_id or "")
    if sequence is not None:
        extra.parameters["sequence_id"].int64_param = sequence.sequence_id
        extra.parameters["sequence_start"].bool_param = sequence.start
        extra.parameters["sequence_end"].bool_param = sequence.end
    return bytes(extra.SerializeToString())


def _target(host: str, port: int) -> str:
    return format_host(host, port)


class GrpcTransport:
    """One model on a v2 gRPC server; ``streaming`` picks ``grpc-stream`` over ``grpc``."""

    def __init__(
        self,
        url: str,
        model: str,
        version: str = "",
        *,
        streaming: bool = False,
        headers: Headers = (),
        tls: GrpcTlsSettings | None = None,
    ) -> None:
        self.name = "grpc-stream" if streaming else "grpc"
        host, port = metadata.split_url(url, DEFAULT_GRPC_PORT)
        self._host, self._port = host, port
        target = _target(host, port)
        self._metadata = grpc_metadata(headers)
        self._tls = tls
        self._ssl: ssl.SSLContext | None = None if tls is None else tls.context()
        scheme = "http" if tls is None else "https"

        def block(method: str) -> bytes:
            return request_headers(target, SERVICE + method, scheme=scheme, metadata=self._metadata)

        self.header_block = block("ModelInfer")
        self.stream_header_block = block("ModelStreamInfer")
        self._model, self._version = model, version
        self._streaming = streaming
        if tls is None:
            self._channel = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
        else:
            root, key, chain = tls.read()
            credentials = grpc.ssl_channel_credentials(root, key, chain)
            self._channel = grpc.aio.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
        self.wires: list[bytes] = []
        self.info: ModelInfo | None = None
        self._channels: set[GrpcChannel | GrpcStreamChannel] = set()
        self._extensions: set[str] | None = None

    async def _rpc(self, method: str, request: Any, reply_type: Any) -> Any:
        call = self._channel.unary_unary(
            SERVICE + method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=reply_type.FromString,
        )
        try:
            return await call(request, metadata=self._metadata or None)
        except grpc.aio.AioRpcError as exc:
            detail = f"{method}: {exc.details() or exc.code()}"
            if exc.code() in _REFUSED or metadata.is_restricted(detail):
                raise PerfAccessError(f"{detail} ({metadata.ACCESS_HINT})") from None
            raise PerfRequestError(detail) from None

    async def model_info(self) -> ModelInfo:
        if self._ssl is not None:  # a failed handshake says why, where grpcio says UNAVAILABLE
            (await self.connect()).close()
        meta = await self._rpc(
            "ModelMetadata",
            service_pb2.ModelMetadataRequest(name=self._model, version=self._version),
            service_pb2.ModelMetadataResponse,
        )
        config = await self._rpc(
            "ModelConfig",
            service_pb2.ModelConfigRequest(name=self._model, version=self._version),
            service_pb2.ModelConfigResponse,
        )
        self.info = metadata.model_info_from_proto(meta, config.config, self._version)
        return self.info

    async def statistics(self) -> dict[str, Any] | None:
        if self._extensions is None:
            server = await self._rpc(
                "ServerMetadata",
                service_pb2.ServerMetadataRequest(),
                service_pb2.ServerMetadataResponse,
            )
            self._extensions = set(server.extensions)
        if "statistics" not in self._extensions:
            return None
        answer = await self._rpc(
            "ModelStatistics",
            service_pb2.ModelStatisticsRequest(name=self._model, version=self._version),
            service_pb2.ModelStatisticsResponse,
        )
        return metadata.statistics_from_proto(answer, self._model, self._version)

    async def prepare(
        self, requests: Sequence[RequestData], batch_size: int, outputs: Sequence[str] | None
    ) -> None:
        info = self.info or await self.model_info()
        if info.decoupled and not self._streaming:
            raise InvalidArgumentError(
                f"model '{info.name}' is decoupled: it answers over a stream only; use "
                "--streaming (transport grpc-stream)"
            )
        self.wires = [
            self._build(batch_tensors(r, batch_size, info.max_batch_size), outputs)
            for r in requests
        ]

    def _build(self, tensors: dict[str, np.ndarray], outputs: Sequence[str] | None) -> bytes:
        request = service_pb2.ModelInferRequest(model_name=self._model, model_version=self._version)
        for name, array in tensors.items():
            request.inputs.add(name=name, datatype=datatype_of(array), shape=list(array.shape))
            request.raw_input_contents.append(raw_bytes(array))
        for name in outputs or ():
            request.outputs.add(name=name)
        if self._streaming:
            request.parameters[ENABLE_EMPTY_FINAL].bool_param = True
        return bytes(request.SerializeToString())

    async def open_channel(self) -> GrpcChannel | GrpcStreamChannel:
        if not self.wires:
            raise InvalidArgumentError("prepare() the requests before opening a channel")
        channel: GrpcChannel | GrpcStreamChannel
        if self._streaming:
            assert self.info is not None
            channel = GrpcStreamChannel(self, decoupled=self.info.decoupled)
        else:
            channel = GrpcChannel(self, await self.connect())
        self._channels.add(channel)
        return channel

    async def connect(self) -> Http2Connection:
        """A new HTTP/2 connection for unary calls."""
        link, protocol = await open_connection(
            Http2Connection, self._host, self._port, context=self._ssl, tls=self._tls, over="gRPC"
        )
        if self._ssl is not None:
            tls_object = link.get_extra_info("ssl_object")
            if tls_object is None or tls_object.selected_alpn_protocol() != "h2":
                protocol.close()
                raise PerfRequestError(
                    f"{self._host}:{self._port} did not agree to HTTP/2 over TLS (ALPN h2): is "
                    "it a gRPC server?"
                )
        return protocol

    def forget(self, channel: GrpcChannel | GrpcStreamChannel) -> None:
        self._channels.discard(channel)

    async def close(self) -> None:
        for channel in list(self._channels):
            await channel.close()
        await self._channel.close()


class GrpcChannel:
    """Unary ``ModelInfer`` calls of prepared bytes over its own HTTP/2 connection
    (:mod:`inferd.tools.perf.grpc_h2`: grpcio's client costs several times more CPU per call)."""

    def __init__(self, transport: GrpcTransport, connection: Http2Connection) -> None:
        self._transport = transport
        self._conn: Http2Connection | None = connection
        self._head = transport.header_block
        self._messages = [grpc_message(wire) for wire in transport.wires]

    async def infer(self, index: int, sequence: SequenceFlags | None = None) -> None:
        conn = self._conn
        if conn is None or not conn.open:
            conn = self._conn = await self._transport.connect()
        if sequence is None:
            await conn.call(self._head, self._messages[index])
        else:
            wire = self._transport.wires[index] + call_suffix(None, sequence)
            await conn.call(self._head, grpc_message(wire))

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._transport.forget(self)


class GrpcStreamChannel:
    """One ``ModelStreamInfer`` stream on its own HTTP/2 connection; each request waits for its
    final response. A cancelled request leaves the stream open: its late answers carry its id
    and are skipped."""

    def __init__(self, transport: GrpcTransport, *, decoupled: bool) -> None:
        self._transport = transport
        self._wires = transport.wires
        self._decoupled = decoupled
        self._conn: Http2Connection | None = None
        self._stream = 0
        self._ended: asyncio.Future[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._request_id = ""
        self._count = 0

    async def _open(self) -> Http2Connection:
        conn = self._conn
        if conn is None or not conn.open:
            conn = self._conn = await self._transport.connect()
        self._stream, self._ended = conn.open_stream(
            self._transport.stream_header_block, self._on_message
        )
        self._ended.add_done_callback(self._on_end)
        return conn

    async def infer(self, index: int, sequence: SequenceFlags | None = None) -> None:
        conn = self._conn
        if conn is None or self._ended is None or self._ended.done():
            conn = await self._open()
        self._count += 1
        self._request_id = request_id = str(self._count)
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        await conn.send(
            self._stream, grpc_message(self._wires[index] + call_suffix(request_id, sequence))
        )
        await waiter

    def _on_message(self, raw: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        try:
            reply = service_pb2.ModelStreamInferResponse.FromString(raw)
        except DecodeError:
            waiter.set_exception(PerfRequestError("the server sent a malformed stream response"))
            return
        response = reply.infer_response
        if response.id and response.id != self._request_id:
            return  # an answer to an earlier, abandoned request
        if reply.error_message:
            waiter.set_exception(PerfRequestError(reply.error_message))
            return
        flag = response.parameters.get(FINAL_RESPONSE)
        if flag.bool_param if flag is not None else not self._decoupled:
            waiter.set_result(None)

    def _on_end(self, ended: asyncio.Future[None]) -> None:
        error = None if ended.cancelled() else ended.exception()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error or PerfRequestError("the server ended the stream"))

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        self._transport.forget(self)
