"""The engine's side of the front-end channels: every call becomes a task on the real engine.

An inference request runs through :meth:`Engine.infer` (so it reaches the model's one
scheduler and batches with the requests of every other front end); an HTTP request runs
through the engine process's own HTTP app and a gRPC call through its own servicer, so that
health, metadata, statistics, repository control and the rest are answered in one place,
exactly as a single process answers them. A CANCEL cancels the call's task; a front end that
goes away has all its calls cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import grpc
from tritonclient.grpc import service_pb2

from inferd.errors import InferdError, InternalError
from inferd.frontends.grpc.handlers import Undecodable
from inferd.frontends.http.asgi import Message as AsgiMessage
from inferd.server.frontends.link import MessageLink
from inferd.server.frontends.messages import (
    FINAL,
    MORE,
    STREAM_WINDOW,
    UNDECODABLE,
    Kind,
    Message,
    decode_request,
    encode_error,
    encode_response_parts,
    json_and_blobs,
    split_json,
)

__all__ = ["EngineBridge"]

_SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]


class _CallContext:
    """What the servicer's unary methods use of a ``grpc.aio.ServicerContext``: the caller's
    metadata in, the status out."""

    def __init__(self, metadata: list[tuple[str, str]]) -> None:
        self._metadata = tuple(metadata)
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def peer(self) -> str:
        return "frontend"


class EngineBridge:
    """Serves the calls of every front end's link on the engine's loop."""

    def __init__(
        self,
        engine: Any,
        *,
        http_apps: dict[str, Callable[..., Any]],
        servicer: Any | None,
        log: logging.Logger,
    ) -> None:
        self._engine = engine
        self._http_apps = http_apps  # by the port's service: "http", "openai"
        self._servicer = servicer
        self._log = log

    async def serve(self, link: MessageLink, name: str) -> None:
        """Answer ``link``'s calls until it fails or this task is cancelled; then every call
        still running for it is cancelled (its front end has gone)."""
        tasks: dict[int, asyncio.Task[None]] = {}
        disconnects: dict[int, asyncio.Event] = {}
        streams: dict[int, asyncio.Queue[Message]] = {}  # the request messages of streams
        credits: dict[int, asyncio.Semaphore] = {}  # streamed replies each call may still send
        loop = asyncio.get_running_loop()

        def done(call: int, task: asyncio.Task[None]) -> None:
            if tasks.get(call) is task:
                del tasks[call]
                disconnects.pop(call, None)
                streams.pop(call, None)
                credits.pop(call, None)

        infer = self._infer
        try:
            while True:
                message = link.poll()  # drained without a coroutine per message
                if message is None:
                    message = await link.receive()
                if message.kind is Kind.INFER:  # the common case first: no state but the task
                    # the task takes itself out of ``tasks`` when it ends (no done callback)
                    tasks[message.call] = loop.create_task(infer(link, message, tasks))
                    continue
                if message.kind is Kind.CANCEL:
                    link.forget(message.call)
                    task = tasks.get(message.call)
                    event = disconnects.get(message.call)
                    if event is not None:  # an HTTP app sees the client go, as it would
                        event.set()
                    elif task is not None:
                        task.cancel()
                        if message.call not in credits:  # no stream state to clean up: an
                            # inference may not have started, so cannot take itself out
                            del tasks[message.call]
                    continue
                if message.kind is Kind.ACK:
                    credit = credits.get(message.call)
                    if credit is not None:
                        credit.release()
                    continue
                if message.kind is Kind.STREAM_IN:
                    inbox = streams.get(message.call)
                    if inbox is not None:
                        inbox.put_nowait(message)
                    continue
                if message.kind is Kind.HTTP:
                    event = disconnects[message.call] = asyncio.Event()
                    credit = credits[message.call] = asyncio.Semaphore(STREAM_WINDOW)
                    coro = self._http(link, message, event, credit)
                elif message.kind is Kind.GRPC:
                    coro = self._grpc(link, message)
                elif message.kind is Kind.GRPC_STREAM:
                    inbox = streams[message.call] = asyncio.Queue()
                    credit = credits[message.call] = asyncio.Semaphore(STREAM_WINDOW)
                    coro = self._grpc_stream(link, message, inbox, credit)
                else:
                    self._log.warning("front end %s sent an unexpected %s", name, message.kind.name)
                    continue
                task = loop.create_task(coro)
                tasks[message.call] = task
                task.add_done_callback(partial(done, message.call))
        finally:
            running = list(tasks.values())
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _reply_error(self, link: MessageLink, call: int, exc: BaseException) -> None:
        if not isinstance(exc, InferdError):
            self._log.error("call %d from a front end failed", call, exc_info=exc)
            exc = InternalError("internal error")
        await link.send(Kind.ERROR, call, encode_error(exc), FINAL)

    async def _infer(
        self, link: MessageLink, message: Message, tasks: dict[int, asyncio.Task[None]]
    ) -> None:
        call = message.call
        try:
            try:
                response = await self._engine.infer(decode_request(message.body))
                body = encode_response_parts(response)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._reply_error(link, call, exc)
                return
            if not link.send_nowait(Kind.RESPONSE, call, body, FINAL):
                await link.send(Kind.RESPONSE, call, body, FINAL)
        finally:
            tasks.pop(call, None)

    async def _http(
        self, link: MessageLink, message: Message, gone: asyncio.Event, credit: asyncio.Semaphore
    ) -> None:
        call = message.call
        try:
            meta, body = split_json(message.body)
            app = self._http_apps.get(meta["app"])
            if app is None:
                raise InternalError(f"the engine serves no '{meta['app']}' app")
            scope = {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": meta["http_version"],
                "method": meta["method"],
                "scheme": meta["scheme"],
                "path": meta["path"],
                "raw_path": None
                if meta["raw_path"] is None
                else meta["raw_path"].encode("latin-1"),
                "query_string": meta["query_string"].encode("latin-1"),
                "root_path": "",
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in meta["headers"]],
                "client": None if meta["client"] is None else tuple(meta["client"]),
                "server": None if meta["server"] is None else tuple(meta["server"]),
            }
            pending: list[bytes] = [bytes(body)]

            async def receive() -> AsgiMessage:
                if pending:
                    return {"type": "http.request", "body": pending.pop(), "more_body": False}
                await gone.wait()
                return {"type": "http.disconnect"}

            async def send(reply: AsgiMessage) -> None:
                if gone.is_set():
                    return
                if reply["type"] == "http.response.start":
                    headers = [
                        [bytes(k).decode("latin-1"), bytes(v).decode("latin-1")]
                        for k, v in reply.get("headers", ())
                    ]
                    head = {"status": reply["status"], "headers": headers}
                    await link.send(Kind.HTTP_START, call, json_and_blobs(head, []))
                elif reply["type"] == "http.response.body":
                    more = MORE if reply.get("more_body", False) else 0
                    await credit.acquire()
                    await link.send(Kind.HTTP_BODY, call, bytes(reply.get("body", b"")), more)

            await app(scope, receive, send)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._reply_error(link, call, exc)
            return
        if not gone.is_set():
            await link.send(Kind.HTTP_END, call, b"", FINAL)

    async def _grpc(self, link: MessageLink, message: Message) -> None:
        call = message.call
        try:
            if self._servicer is None:
                raise InternalError("the engine serves no gRPC servicer")
            meta, data = split_json(message.body)
            method = _SERVICE.methods_by_name.get(meta["method"])
            if method is None or method.server_streaming or method.client_streaming:
                raise InternalError(f"'{meta['method']}' is not a unary call of the service")
            if meta.get("undecodable") is not None:
                request: Any = Undecodable(meta["undecodable"])
            else:
                request = getattr(service_pb2, method.input_type.name).FromString(bytes(data))
            context = _CallContext([(k, v) for k, v in meta["metadata"]])
            reply = await getattr(self._servicer, meta["method"])(request, context)
            head = {
                "code": None if context.code is None else context.code.value[0],
                "details": context.details,
            }
            blob = b"" if reply is None else reply.SerializeToString()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._reply_error(link, call, exc)
            return
        await link.send(Kind.GRPC_REPLY, call, json_and_blobs(head, [blob]), FINAL)

    async def _grpc_stream(
        self,
        link: MessageLink,
        message: Message,
        inbox: asyncio.Queue[Message],
        credit: asyncio.Semaphore,
    ) -> None:
        call = message.call

        async def requests() -> AsyncIterator[Any]:
            while True:
                item = await inbox.get()
                if item.flags & FINAL:
                    return
                if item.flags & UNDECODABLE:
                    yield Undecodable(bytes(item.body).decode())
                else:
                    yield service_pb2.ModelInferRequest.FromString(bytes(item.body))

        try:
            if self._servicer is None:
                raise InternalError("the engine serves no gRPC servicer")
            meta, _ = split_json(message.body)
            context = _CallContext([(k, v) for k, v in meta["metadata"]])
            responses = self._servicer.ModelStreamInfer(requests(), context)
            async with contextlib.aclosing(responses):
                async for response in responses:
                    await credit.acquire()
                    await link.send(Kind.STREAM_OUT, call, response.SerializeToString())
            head = {
                "code": None if context.code is None else context.code.value[0],
                "details": context.details,
            }
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._reply_error(link, call, exc)
            return
        await link.send(Kind.GRPC_REPLY, call, json_and_blobs(head, [b""]), FINAL)
