"""The engine as a front-end process sees it: every call goes over the channel to the engine.

:class:`EngineProxy` implements what the front ends' inference paths call of the engine
(``infer``, ``tracing``) by sending the request to the engine process and awaiting its reply;
everything else (health, metadata, configuration, statistics, repository control, shared
memory, traffic policies, generate, /v1, the console) is answered by the engine's own HTTP app
and gRPC servicer, to which :meth:`EngineProxy.forward_http` and :meth:`EngineProxy.forward_grpc`
hand the request as it came, so that every answer is the one a single process gives.
A caller that goes away (a cancelled task) cancels its call in the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Coroutine
from typing import Any

import orjson

from inferd.core.inference import InferRequest, InferResponse
from inferd.errors import UnavailableError
from inferd.frontends.http.asgi import Receive, Scope, Send
from inferd.server.frontends.link import MessageLink
from inferd.server.frontends.messages import (
    FINAL,
    MORE,
    UNDECODABLE,
    Kind,
    Message,
    decode_error,
    decode_message,
    decode_response,
    encode_error,
    encode_message,
    encode_request_parts,
    json_and_blobs,
    split_json,
)

__all__ = ["EngineProxy"]


_GONE = "the engine process is not answering (it stopped or restarts)"


class EngineProxy:
    """The engine's inference API over a link; ``await run()`` reads the replies."""

    tracing = False  # traced requests are forwarded whole; this side never begins a trace

    def __init__(self, link: MessageLink, *, log: logging.Logger) -> None:
        self._link = link
        self._log = log
        self._ids = itertools.count(1)
        self._futures: dict[int, asyncio.Future[Message]] = {}
        self._queues: dict[int, asyncio.Queue[Message]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # run()'s: no lookup per call

    async def run(self) -> None:
        """Deliver every reply to its call until the link fails; then every call fails."""
        self._loop = asyncio.get_running_loop()
        link = self._link
        try:
            while True:
                message = link.poll()  # drained without a coroutine per message
                if message is None:
                    message = await link.receive()
                future = self._futures.pop(message.call, None)
                if future is not None:
                    if not future.done():
                        future.set_result(message)
                    continue
                queue = self._queues.get(message.call)
                if queue is not None:
                    queue.put_nowait(message)
                # else: the call was cancelled; its late replies are dropped
        finally:
            self._closed = True
            for future in self._futures.values():
                if not future.done():
                    future.set_exception(UnavailableError(_GONE))
            self._futures.clear()
            gone = encode_message(Kind.ERROR, 0, encode_error(UnavailableError(_GONE)))
            for queue in self._queues.values():
                queue.put_nowait(decode_message(gone))

    async def _send(
        self, kind: Kind, call: int, body: bytes | list[bytes | memoryview], flags: int = 0
    ) -> None:
        if self._closed:
            raise UnavailableError(_GONE)
        await self._link.send(kind, call, body, flags)

    def _cancel(self, call: int) -> None:
        """Tell the engine that nobody waits for ``call`` any more."""
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._send(Kind.CANCEL, call, b""))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- inference ----------------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        if self._closed:
            raise UnavailableError(_GONE)
        call = next(self._ids)
        loop = self._loop or asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()
        self._futures[call] = future
        try:
            body = encode_request_parts(request)
            if not self._link.send_nowait(Kind.INFER, call, body):
                await self._link.send(Kind.INFER, call, body)
            del body
            message = await future
        except asyncio.CancelledError:
            if self._futures.pop(call, None) is not None:
                self._cancel(call)
            raise
        finally:
            self._futures.pop(call, None)
        if message.kind is Kind.ERROR:
            raise decode_error(message.body)
        return decode_response(message.body)

    # -- whole requests the engine answers -----------------------------------------------------

    async def forward_http(
        self, scope: Scope, receive: Receive, send: Send, max_body_bytes: int, app: str = "http"
    ) -> None:
        """Have the engine's HTTP app (``app``: the one of the port, "http" or "openai") answer
        this request; its messages are sent as they come
        (a stream of server-sent events streams). A body past ``max_body_bytes`` is cut one
        byte past it, so that the engine's app refuses it with its own answer."""
        chunks: list[bytes] = []
        size = 0
        while size <= max_body_bytes:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)[: max_body_bytes + 1]
        meta = {
            "app": app,
            "method": scope["method"],
            "path": scope["path"],
            "raw_path": _text(scope.get("raw_path")),
            "query_string": _text(scope.get("query_string", b"")),
            "headers": [[_text(k), _text(v)] for k, v in scope.get("headers", ())],
            "scheme": scope.get("scheme", "http"),
            "http_version": scope.get("http_version", "1.1"),
            "client": scope.get("client"),
            "server": scope.get("server"),
        }
        await self._stream(
            Kind.HTTP, json_and_blobs(meta, [body]), _http_replayer(send), _disconnected(receive)
        )

    async def forward_grpc(
        self,
        method: str,
        request: bytes,
        metadata: list[tuple[str, str]],
        undecodable: str | None = None,
    ) -> tuple[int | None, str, bytes]:
        """The engine's servicer's answer to a unary call: (status code value or None, details,
        the serialized response). ``undecodable``: why the request did not parse (the call is
        one whose servicer method answers that itself)."""
        replies: list[Message] = []

        async def keep(message: Message) -> bool:
            replies.append(message)
            return True

        meta = {
            "method": method,
            "metadata": [[k, v] for k, v in metadata],
            "undecodable": undecodable,
        }
        await self._stream(Kind.GRPC, json_and_blobs(meta, [request]), keep, None)
        message = replies[-1]
        if message.kind is Kind.ERROR:
            raise decode_error(message.body)
        head, data = split_json(message.body)
        return head["code"], head["details"], bytes(data)

    async def grpc_stream(
        self, metadata: list[tuple[str, str]], requests: AsyncIterable[tuple[bytes, str | None]]
    ) -> AsyncGenerator[Message, None]:
        """A ``ModelStreamInfer`` stream served by the engine's servicer. ``requests`` are the
        client's messages, serialized (or, for one that did not parse, why not); they leave as
        they come while the engine's responses (STREAM_OUT) are yielded, and the stream ends
        with its GRPC_REPLY (the status) or an ERROR, yielded last."""
        call = next(self._ids)
        queue: asyncio.Queue[Message] = asyncio.Queue()
        self._queues[call] = queue
        finished = False
        pump: asyncio.Task[None] | None = None
        try:
            meta = {"metadata": [[k, v] for k, v in metadata]}
            await self._send(Kind.GRPC_STREAM, call, json_and_blobs(meta, []))
            pump = asyncio.get_running_loop().create_task(self._pump(call, requests))
            while True:
                message = await queue.get()
                if message.kind is Kind.GRPC_REPLY or message.kind is Kind.ERROR:
                    finished = True
                    yield message
                    return
                yield message
                await self._send(Kind.ACK, call, b"")  # passed on: the engine may send more
        finally:
            self._queues.pop(call, None)
            if pump is not None:
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)
            if not finished:
                self._cancel(call)

    async def _pump(self, call: int, requests: AsyncIterable[tuple[bytes, str | None]]) -> None:
        async for data, undecodable in requests:
            if undecodable is None:
                await self._send(Kind.STREAM_IN, call, data)
            else:
                await self._send(Kind.STREAM_IN, call, undecodable.encode(), UNDECODABLE)
        await self._send(Kind.STREAM_IN, call, b"", FINAL)

    async def _stream(
        self,
        kind: Kind,
        body: bytes,
        deliver: Callable[[Message], Awaitable[bool]],
        gone: Callable[[], Coroutine[Any, Any, None]] | None,
    ) -> None:
        """Send one call and hand each reply to ``deliver`` until it returns true (the last);
        an ERROR reply ends the call too. ``gone`` returns when the caller has gone."""
        call = next(self._ids)
        queue: asyncio.Queue[Message] = asyncio.Queue()
        self._queues[call] = queue
        watcher = None if gone is None else asyncio.get_running_loop().create_task(gone())
        finished = False
        try:
            await self._send(kind, call, body)
            while True:
                if watcher is None:
                    message = await queue.get()
                else:
                    getter = asyncio.ensure_future(queue.get())
                    done, _ = await asyncio.wait(
                        {getter, watcher}, return_when=asyncio.FIRST_COMPLETED
                    )
                    if getter not in done:
                        getter.cancel()
                        return  # the client has gone: the engine is told below
                    message = getter.result()
                if message.kind is Kind.ERROR:
                    finished = True
                    await deliver(message)
                    return
                if await deliver(message):
                    finished = True
                    return
                if message.kind is Kind.HTTP_BODY:  # passed on: the engine may send more
                    await self._send(Kind.ACK, call, b"")
        finally:
            self._queues.pop(call, None)
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(BaseException):
                    await watcher
            if not finished:
                self._cancel(call)


def _text(value: Any) -> Any:
    return value.decode("latin-1") if isinstance(value, bytes | bytearray) else value


def _disconnected(receive: Receive) -> Callable[[], Coroutine[Any, Any, None]]:
    async def wait() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    return wait


def _http_replayer(send: Send) -> Callable[[Message], Awaitable[bool]]:
    """Send the engine app's messages on this connection; true after the last."""
    started = False

    async def deliver(message: Message) -> bool:
        nonlocal started
        if message.kind is Kind.HTTP_START:
            started = True
            head, _ = split_json(message.body)
            headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in head["headers"]]
            await send(
                {"type": "http.response.start", "status": head["status"], "headers": headers}
            )
            return False
        if message.kind is Kind.HTTP_BODY:
            more = bool(message.flags & MORE)
            await send(
                {"type": "http.response.body", "body": bytes(message.body), "more_body": more}
            )
            return False
        if message.kind is Kind.ERROR:
            if started:  # the engine failed mid-response: the connection closes short of it
                raise decode_error(message.body)
            body = orjson.dumps({"error": decode_error(message.body).message})
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return True
        return bool(message.flags & FINAL)

    return deliver
