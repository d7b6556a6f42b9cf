"""``ModelStreamInfer`` for decoupled models: every response of a request, as the model sends it.

Each response carries the parameter ``triton_final_response`` (true only on the last one). A
model that ends a request with the final flag alone sends nothing more, unless the request
asked for ``triton_enable_empty_final_response``: then an empty response (no outputs, the
request id, model name and version) marks the end. A response with an error is sent in band
(``error_message``); the stream stays open.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from tritonclient.grpc import service_pb2

from inferd.codecs.v2_grpc import (
    ENABLE_EMPTY_FINAL_RESPONSE,
    decode_infer_request,
    encode_infer_response,
)
from inferd.engine import Engine

__all__ = ["FINAL_RESPONSE", "Started", "decoupled_responses"]

FINAL_RESPONSE = "triton_final_response"

_Failure = tuple[Any, str]
_StreamResult = tuple[Any, _Failure | None]


async def decoupled_responses(
    engine: Engine,
    msg: Any,
    shm: Any,
    failure: Callable[[Any, Exception], _StreamResult],
) -> AsyncGenerator[_StreamResult, None]:
    """The stream messages answering ``msg`` (closing this iterator cancels the request)."""
    try:
        request = decode_infer_request(msg, shm)
    except Exception as exc:
        yield failure(msg, exc)
        return
    empty_final = bool(request.parameters.pop(ENABLE_EMPTY_FINAL_RESPONSE, False))
    try:
        async with contextlib.aclosing(engine.stream_infer(request)) as events:
            async for event in events:
                if event.error is not None:
                    yield failure(msg, event.error)
                    continue
                out = service_pb2.ModelStreamInferResponse()
                response = out.infer_response
                if event.response is not None:
                    encode_infer_response(event.response, into=response, request=request)
                elif not (event.final and empty_final):
                    continue
                else:
                    response.id = msg.id
                    response.model_name = event.model_name
                    response.model_version = event.model_version
                response.parameters[FINAL_RESPONSE].bool_param = event.final
                yield out, None
    except Exception as exc:
        yield failure(msg, exc)


_END = object()


class Started(AsyncIterator[_StreamResult]):
    """Runs ``responses`` at once, keeping what it yields until it is read: the requests of
    one stream do not wait for each other's completion, even though their responses are
    written in request order. ``aclose`` stops it (which cancels the request)."""

    def __init__(self, responses: AsyncGenerator[_StreamResult, None]) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task = asyncio.create_task(self._run(responses))

    async def _run(self, responses: AsyncGenerator[_StreamResult, None]) -> None:
        try:
            async with contextlib.aclosing(responses) as items:
                async for item in items:
                    self._queue.put_nowait(item)
        finally:
            self._queue.put_nowait(_END)

    def __aiter__(self) -> Started:
        return self

    async def __anext__(self) -> _StreamResult:
        item = await self._queue.get()
        if item is _END:
            self._queue.put_nowait(_END)
            if not self._task.cancelled() and self._task.exception() is not None:
                raise self._task.exception()  # type: ignore[misc]
            raise StopAsyncIteration
        result: _StreamResult = item
        return result

    async def aclose(self) -> None:
        if not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
