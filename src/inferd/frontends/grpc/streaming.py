"""``ModelStreamInfer``: the requests of one stream, answered as their responses are ready.

As on Triton, responses are written in the order they are produced, not in request order:

- every response of a decoupled model is written as the model sends it, so the responses of
  the stream's requests interleave (clients match them by request id and the final flag);
- an ordinary model's response is written as soon as it is computed and every earlier
  ordinary request of the stream has been answered (Triton keeps ordinary responses in request
  order among themselves), without waiting for decoupled requests.

Each decoupled response carries the parameter ``triton_final_response`` (true only on the last
one). A model that ends a request with the final flag alone sends nothing more, unless the
request asked for ``triton_enable_empty_final_response``: then an empty response (no outputs,
the request id, model name and version) marks the end. A response with an error is sent in band
(``error_message``); the stream stays open.

Back-pressure: at most ``max_inflight`` requests of a stream run or wait to be answered (the
stream reads no further request until one is done, and HTTP/2 flow control pushes back on
the client); at most ``max_responses`` responses wait in the server for the client to read
them: a bounded queue of encoded responses (at most a quarter of them) and, for the rest, a
:class:`~inferd.core.streaming.ResponseBudget` that makes a decoupled model's send wait while
the stream already holds that many.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from typing import Any

from tritonclient.grpc import service_pb2

from inferd.codecs.v2_grpc import (
    ENABLE_EMPTY_FINAL_RESPONSE,
    decode_infer_request,
    encode_infer_response,
)
from inferd.core.streaming import ResponseBudget
from inferd.engine import Engine

__all__ = ["FINAL_RESPONSE", "decoupled_responses", "serve_stream", "split_response_room"]

FINAL_RESPONSE = "triton_final_response"

_Failure = tuple[Any, str]
StreamResult = tuple[Any, _Failure | None]  # (ModelStreamInferResponse, failure)
#: ``answer(msg, budget)``: whether the request's answer keeps request order (an ordinary
#: model's), and its responses.
Answer = Callable[[Any, ResponseBudget], tuple[bool, AsyncGenerator[StreamResult, None]]]


async def decoupled_responses(
    engine: Engine,
    msg: Any,
    shm: Any,
    failure: Callable[[Any, Exception], StreamResult],
    budget: ResponseBudget | None = None,
    trace_context: dict[str, str] | None = None,
) -> AsyncGenerator[StreamResult, None]:
    """The stream messages answering ``msg`` (closing this iterator cancels the request);
    ``trace_context``: the caller's, from the stream's metadata, while the server traces."""
    try:
        request = decode_infer_request(msg, shm)
    except Exception as exc:
        yield failure(msg, exc)
        return
    request.trace_context = trace_context
    empty_final = bool(request.parameters.pop(ENABLE_EMPTY_FINAL_RESPONSE, False))
    try:
        async with contextlib.aclosing(engine.stream_infer(request, budget)) as events:
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


def split_response_room(max_responses: int) -> tuple[int, int]:
    """``max_responses`` as (encoded responses waiting to be written, responses a stream's
    models may send ahead of it): a quarter (at least one) and the rest (at least one)."""
    if max_responses < 2:
        raise ValueError("max_responses must be >= 2")
    written = max(1, max_responses // 4)
    return written, max_responses - written


_END = object()


async def serve_stream(
    requests: AsyncIterable[Any],
    answer: Answer,
    *,
    max_inflight: int,
    max_responses: int,
) -> AsyncGenerator[StreamResult, None]:
    """Every response to the stream's ``requests``, as described in the module doc.

    Ends when the client has sent its last request and every request is answered; a failure of
    the request stream itself is raised after the responses of the requests read before it.
    Closing this iterator cancels every request still running (their models see it).
    """
    written, ahead = split_response_room(max_responses)
    budget = ResponseBudget(ahead)
    ready: asyncio.Queue[Any] = asyncio.Queue(written)
    slots = asyncio.Semaphore(max_inflight)
    running: set[asyncio.Task[None]] = set()

    async def respond(
        responses: AsyncGenerator[StreamResult, None], after: asyncio.Task[None] | None
    ) -> None:
        try:
            async with contextlib.aclosing(responses):
                async for item in responses:
                    if after is not None:  # an ordinary answer: after the earlier ones
                        await asyncio.wait((after,))
                        after = None
                    await ready.put(item)
        finally:
            slots.release()

    async def read() -> None:
        last_ordered: asyncio.Task[None] | None = None
        failure: Exception | None = None
        try:
            async for msg in requests:
                await slots.acquire()
                try:
                    ordered, responses = answer(msg, budget)
                    task = asyncio.create_task(
                        respond(responses, last_ordered if ordered else None)
                    )
                except BaseException:
                    slots.release()
                    raise
                running.add(task)
                task.add_done_callback(running.discard)
                if ordered:
                    last_ordered = task
        except Exception as exc:
            failure = exc
        if running:
            await asyncio.wait(set(running))
        await ready.put(_END)
        if failure is not None:
            raise failure

    reader = asyncio.create_task(read())
    try:
        while True:
            item = await ready.get()
            if item is _END:
                break
            yield item
        await reader
    finally:
        budget.close()  # a model thread waiting for room gives up: nobody will read
        reader.cancel()
        tasks = [reader, *running]
        for task in running:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
