"""A lean asyncio HTTP/1.1 client for the load generator: ``http-json`` and ``http-binary``.

Each :class:`HttpChannel` owns one keep-alive connection (an :class:`asyncio.Protocol` with
httptools' response parser, so chunked and ``Content-Length`` answers both end where they should).
Every request's bytes, start line and headers included, are built once in
:meth:`HttpTransport.prepare`; sending one is a single ``write``. A 200 answer is not decoded at
all: the parser only finds its end. Any other status raises :class:`PerfRequestError` with the
server's ``{"error": ...}`` message.

``http-binary`` sends the inputs as the binary tensor extension
(``Inference-Header-Content-Length``) and asks for binary outputs; ``http-json`` sends and
receives v2 JSON.

Extra headers (``-H``) go into every request's prepared bytes, and into the metadata and
statistics requests. An ``https://`` server, or :class:`~inferd.client.tls.HttpsSettings`,
puts every connection on TLS (one context per transport).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import httptools
import numpy as np
import orjson

from inferd.client.endpoint import format_host
from inferd.client.headers import Headers, http_lines
from inferd.client.tls import HttpsSettings
from inferd.errors import InvalidArgumentError, PerfAccessError, PerfRequestError
from inferd.tools.perf import metadata
from inferd.tools.perf.connect import open_connection
from inferd.tools.perf.http_connection import HttpAnswerConnection
from inferd.tools.perf.inputs import batch_tensors
from inferd.tools.perf.payload import datatype_of, json_data, raw_bytes
from inferd.tools.perf.transport import ModelInfo, RequestData, SequenceFlags

DEFAULT_HTTP_PORT = 8000
_Reply = tuple[int, bytes | None]


class _Connection(HttpAnswerConnection):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        super().__init__()
        self._waiter: asyncio.Future[_Reply] | None = None
        self._want_body = False
        self._collect = False
        self._chunks: list[bytes] = []
        self._status = 0

    # --- httptools callbacks
    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._collect = self._want_body or self._status != 200

    def on_body(self, body: bytes) -> None:
        if self._collect:
            self._chunks.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        body = None
        if self._collect:
            body = b"".join(self._chunks)
            self._chunks.clear()
        if not self._parser.should_keep_alive():
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, body))

    # --- use
    def send(self, data: bytes, want_body: bool = False) -> asyncio.Future[_Reply]:
        """Write one request; the future gives ``(status, body)`` (the body only when asked
        for or when the status is not 200)."""
        waiter = self._loop.create_future()
        if not self.open or self._transport is None:
            waiter.set_exception(PerfRequestError("the connection to the server is closed"))
            return waiter
        self._waiter = waiter
        self._want_body = want_body
        self._transport.write(data)
        return waiter


class _Prepared:
    """One request: its JSON header (as a dict, for sequence requests built per call), its
    binary blobs, and the whole request's bytes for ordinary calls."""

    __slots__ = ("blobs", "header", "wire")

    def __init__(self, header: dict[str, Any], blobs: bytes, wire: bytes) -> None:
        self.header = header
        self.blobs = blobs
        self.wire = wire


class HttpTransport:
    """One model on a v2 HTTP server; ``binary`` picks ``http-binary`` over ``http-json``."""

    def __init__(
        self,
        url: str,
        model: str,
        version: str = "",
        *,
        binary: bool = True,
        headers: Headers = (),
        tls: HttpsSettings | None = None,
    ) -> None:
        self.name = "http-binary" if binary else "http-json"
        self._host, self._port = metadata.split_url(url, DEFAULT_HTTP_PORT)
        if tls is None and metadata.is_https(url):
            tls = HttpsSettings()
        self._tls = tls
        self._ssl: ssl.SSLContext | None = None if tls is None else tls.context()
        self._extra = http_lines(headers)
        self._model, self._version = model, version
        self._binary = binary
        path = f"/v2/models/{quote(model, safe='')}"
        if version:
            path += f"/versions/{quote(version, safe='')}"
        self._model_path = path
        self._host_header = format_host(self._host, self._port).encode()
        self._prepared: list[_Prepared] = []
        self._control: _Connection | None = None
        self._control_lock = asyncio.Lock()
        self._channels: set[HttpChannel] = set()
        self._extensions: set[str] | None = None
        self._info: ModelInfo | None = None

    # --- connections
    async def connect(self) -> _Connection:
        _, protocol = await open_connection(
            _Connection, self._host, self._port, context=self._ssl, tls=self._tls, over="HTTP"
        )
        return protocol

    async def _get(self, path: str) -> tuple[int, Any]:
        async with self._control_lock:
            if self._control is None or not self._control.open:
                self._control = await self.connect()
            control = self._control
            request = b"GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (
                path.encode(),
                self._host_header,
                self._extra,
            )
            try:
                status, body = await control.send(request, want_body=True)
            except asyncio.CancelledError:
                control.close()  # its answer would be taken for the next request's
                raise
        if status != 200:
            return status, metadata.error_text(status, body)
        try:
            return status, orjson.loads(body or b"null")
        except orjson.JSONDecodeError:
            raise PerfRequestError(f"GET {path}: the answer is not JSON") from None

    async def _get_ok(self, path: str) -> Any:
        status, answer = await self._get(path)
        if status in (401, 403):
            raise PerfAccessError(f"GET {path}: {answer}")
        if status != 200:
            raise PerfRequestError(f"GET {path}: {answer}")
        return answer

    # --- Transport
    async def model_info(self) -> ModelInfo:
        meta = await self._get_ok(self._model_path)
        config = await self._get_ok(self._model_path + "/config")
        if not isinstance(meta, dict) or not isinstance(config, dict):
            raise PerfRequestError("the model metadata or configuration is not a JSON object")
        self._info = metadata.model_info(meta, config, self._version)
        return self._info

    async def statistics(self) -> dict[str, Any] | None:
        if self._extensions is None:
            server = await self._get_ok("/v2")
            self._extensions = (
                set(server.get("extensions") or []) if isinstance(server, dict) else set()
            )
        if "statistics" not in self._extensions:
            return None
        answer = await self._get_ok(self._model_path + "/stats")
        entries = answer.get("model_stats") if isinstance(answer, dict) else None
        return metadata.select_statistics(entries or [], self._model, self._version)

    async def prepare(
        self, requests: Sequence[RequestData], batch_size: int, outputs: Sequence[str] | None
    ) -> None:
        info = self._info or await self.model_info()
        self._prepared = [
            self._build(batch_tensors(r, batch_size, info.max_batch_size), outputs)
            for r in requests
        ]

    def _build(self, tensors: dict[str, np.ndarray], outputs: Sequence[str] | None) -> _Prepared:
        inputs, blobs = [], []
        for name, array in tensors.items():
            entry: dict[str, Any] = {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype_of(array),
            }
            if self._binary:
                blob = raw_bytes(array)
                entry["parameters"] = {"binary_data_size": len(blob)}
                blobs.append(blob)
            else:
                entry["data"] = json_data(array, name)
            inputs.append(entry)
        header: dict[str, Any] = {"inputs": inputs}
        if outputs is not None:
            header["outputs"] = [
                {"name": o, "parameters": {"binary_data": self._binary}} for o in outputs
            ]
        elif self._binary:
            header["parameters"] = {"binary_data_output": True}
        prepared = _Prepared(header, b"".join(blobs), b"")
        prepared.wire = self.wire(prepared, None)
        return prepared

    def wire(self, prepared: _Prepared, sequence: SequenceFlags | None) -> bytes:
        """The whole request (start line, headers, body) for ``prepared``."""
        header = prepared.header
        if sequence is not None:
            params = dict(header.get("parameters") or {})
            params.update(
                sequence_id=sequence.sequence_id,
                sequence_start=sequence.start,
                sequence_end=sequence.end,
            )
            header = {**header, "parameters": params}
        head = orjson.dumps(header)
        lines = [
            b"POST %s/infer HTTP/1.1" % self._model_path.encode(),
            b"Host: " + self._host_header,
        ]
        if self._binary:
            lines.append(b"Content-Type: application/octet-stream")
            lines.append(b"Inference-Header-Content-Length: %d" % len(head))
        else:
            lines.append(b"Content-Type: application/json")
        lines.append(b"Content-Length: %d" % (len(head) + len(prepared.blobs)))
        return b"\r\n".join(lines) + b"\r\n" + self._extra + b"\r\n" + head + prepared.blobs

    async def open_channel(self) -> HttpChannel:
        if not self._prepared:
            raise InvalidArgumentError("prepare() the requests before opening a channel")
        channel = HttpChannel(self, await self.connect())
        self._channels.add(channel)
        return channel

    def forget(self, channel: HttpChannel) -> None:
        self._channels.discard(channel)

    def wires(self) -> list[bytes]:
        """Every prepared request's bytes, by index."""
        return [p.wire for p in self._prepared]

    def prepared(self, index: int) -> _Prepared:
        return self._prepared[index]

    async def close(self) -> None:
        for channel in list(self._channels):
            await channel.close()
        if self._control is not None:
            self._control.close()
            self._control = None


class HttpChannel:
    """One connection sending prepared requests one at a time (reconnects after a close)."""

    def __init__(self, transport: HttpTransport, connection: _Connection) -> None:
        self._transport = transport
        self._conn: _Connection | None = connection
        self._wires = transport.wires()

    async def infer(self, index: int, sequence: SequenceFlags | None = None) -> None:
        conn = self._conn
        if conn is None or not conn.open:
            conn = self._conn = await self._transport.connect()
        if sequence is None:
            data = self._wires[index]
        else:
            data = self._transport.wire(self._transport.prepared(index), sequence)
        try:
            status, body = await conn.send(data)
        except asyncio.CancelledError:
            conn.close()  # its answer would be taken for the next request's
            self._conn = None
            raise
        if status != 200:
            raise PerfRequestError(metadata.error_text(status, body))

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._transport.forget(self)
