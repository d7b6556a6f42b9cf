"""The generate extension: ``POST /v2/models/{m}[/versions/{v}]/generate`` and ``/generate_stream``.

Both take one JSON object whose keys name the model's inputs (:mod:`inferd.codecs.generate_json`)
and serve ordinary and decoupled models alike.

* ``generate`` answers one JSON object. The model must produce exactly one response: a
  decoupled model that sends none, or a second one, gets a 400 naming ``generate_stream``
  (a second response cancels the request at once).
* ``generate_stream`` answers server-sent events (``text/event-stream; charset=utf-8``), one
  ``data: {json}`` event per response, sent as the model produces it. The status line leaves
  with the first response: 200, or the error's status when the first response is an error. An
  error after that is an event ``data: {"error": "..."}``, and it ends the stream (the request
  is cancelled). A request refused before the model runs (bad JSON, an unknown model or input,
  a wrong type) gets a JSON error with its 4xx status, as on ``infer``.

A client that disconnects (the ASGI ``http.disconnect`` message) cancels its request on both
routes: the model sees ``is_cancelled()`` and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable
from typing import Any, TypeVar

from inferd.codecs import v2_http
from inferd.codecs.generate_json import (
    SSE_CONTENT_TYPE,
    check_unique_keys,
    decode_generate_request,
    encode_generate_response,
    sse_event,
)
from inferd.core.inference import InferRequest, InferResponse
from inferd.core.metadata import TensorMetadata
from inferd.core.streaming import ResponseBudget
from inferd.engine import Engine
from inferd.errors import InferdError, InvalidArgumentError
from inferd.frontends.http.asgi import Message, Receive, Send
from inferd.frontends.http.body import OffLoop
from inferd.frontends.http.errors import describe_exception, status_for

__all__ = [
    "STREAM_RESPONSES",
    "ClientGone",
    "SseReply",
    "decode_generate",
    "generate_once",
    "watched",
]

T = TypeVar("T")

#: (response, error, final): one response of the model as the routes see it
_Event = tuple[InferResponse | None, InferdError | None, bool]

#: The responses a decoupled model may have sent that the client has not been sent yet; beyond
#: it the model's next response waits (the HTTP edge sends an event once the client's socket
#: has room for it).
STREAM_RESPONSES = 1024

_ONE_RESPONSE = (
    "generate expects the model to produce exactly 1 response; use generate_stream for a "
    "model that sends any number of responses"
)


class ClientGone(Exception):
    """The client disconnected; its request was cancelled and nothing more is to be sent."""


async def decode_generate(
    engine: Engine, off_loop: OffLoop, model: str, version: str, body: bytes
) -> InferRequest:
    """The inference request of a generate body (``{}`` when empty) for ``model``; a large body
    is parsed off the event loop."""
    await engine.ensure_model(model, version)  # an unknown model: 404 before any parsing
    meta = engine.model_metadata(model, version)
    return await off_loop.run(len(body), _decode, model, version, body, meta.inputs)


def _decode(model: str, version: str, body: bytes, inputs: list[TensorMetadata]) -> InferRequest:
    parsed: Any = v2_http.loads(body) if body.strip() else {}
    if not isinstance(parsed, dict):
        raise InvalidArgumentError("the generate request body must be a JSON object")
    if parsed:
        # valid JSON by now; its parser keeps one of two equal keys
        check_unique_keys(body, {t.name for t in inputs})
    return decode_generate_request(model, version, parsed, inputs)


async def _events(engine: Engine, request: InferRequest) -> AsyncGenerator[_Event, None]:
    """Every response to ``request``: through the stream for a decoupled model (which may send
    at most :data:`STREAM_RESPONSES` ahead of the client), through :meth:`Engine.infer`
    (response cache and all) for any other."""
    if not engine.is_decoupled(request.model_name, request.model_version):
        yield await engine.infer(request), None, True
        return
    budget = ResponseBudget(STREAM_RESPONSES)
    async with contextlib.aclosing(engine.stream_infer(request, budget)) as events:
        async for event in events:
            yield event.response, event.error, event.final


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def watched(work: Awaitable[T], receive: Receive) -> T:
    """``work``, cancelled (and :class:`ClientGone` raised) if the client disconnects first."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_until_disconnect(receive))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise ClientGone
        return task.result()
    finally:
        if not task.done():  # this coroutine itself was cancelled
            task.cancel()
        gone.cancel()


async def _one_response(engine: Engine, request: InferRequest) -> bytes:
    answer: InferResponse | None = None
    async with contextlib.aclosing(_events(engine, request)) as events:
        async for response, error, _final in events:
            if error is not None:
                raise error
            if response is None:
                continue
            if answer is not None:
                raise InvalidArgumentError(_ONE_RESPONSE)  # leaving the stream cancels it
            answer = response
    if answer is None:
        raise InvalidArgumentError(_ONE_RESPONSE)
    return v2_http.dumps(encode_generate_response(answer))


async def generate_once(engine: Engine, request: InferRequest, receive: Receive) -> bytes:
    """The JSON body answering ``generate``; the model's error, or a wrong number of
    responses, is raised."""
    return await watched(_one_response(engine, request), receive)


class SseReply:
    """The answer of ``generate_stream``: written by :meth:`write`, event by event."""

    def __init__(self, engine: Engine, request: InferRequest, log: logging.Logger) -> None:
        self._engine = engine
        self._request = request
        self._log = log

    async def write(self, send: Send, receive: Receive) -> None:
        """Run the request and send its events; :class:`ClientGone` if the client leaves."""
        await watched(self._run(send), receive)

    async def _run(self, send: Send) -> None:
        started = False
        async with contextlib.aclosing(_events(self._engine, self._request)) as events:
            try:
                async for response, error, final in events:
                    if response is None and error is None:
                        continue  # the final flag alone
                    payload = (
                        v2_http.error_body(error.message)
                        if error is not None
                        else v2_http.dumps(encode_generate_response(response))  # type: ignore[arg-type]
                    )
                    if not started:
                        status = 200 if error is None else status_for(error)
                        await _start(send, status, SSE_CONTENT_TYPE)
                        started = True
                    await send(_chunk(sse_event(payload)))
                    if error is not None or final:
                        break
            except Exception as exc:
                status, message = describe_exception(
                    exc, self._log, f"generate_stream {self._request.model_name}"
                )
                if not started:  # refused before any response: a JSON error, as on infer
                    body = v2_http.error_body(message)
                    await _start(send, status, b"application/json", len(body))
                    await send({"type": "http.response.body", "body": body})
                    return
                await send(_chunk(sse_event(v2_http.error_body(message))))
        if not started:  # the model ended the request without a response
            await _start(send, 200, SSE_CONTENT_TYPE)
        await send({"type": "http.response.body", "body": b""})


async def _start(send: Send, status: int, content_type: bytes, length: int | None = None) -> None:
    headers = [(b"content-type", content_type)]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    else:
        headers.append((b"cache-control", b"no-cache"))
    await send({"type": "http.response.start", "status": status, "headers": headers})


def _chunk(data: bytes) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": True}
