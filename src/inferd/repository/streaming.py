"""Running a request as a stream of responses (the in-process caller,
:class:`inferd.repository.calls.InProcessCaller`, builds its streams on it).

A decoupled model answers through the request's :class:`~inferd.core.streaming.ResponseSink`
(zero, one or many responses, then a final flag); any other model answers once, which becomes
one final response. Leaving the stream early (a client that cancels or disconnects) cancels
the sink, which reaches the model, and the scheduled request.

A decoupled model's responses are counted here for the statistics extension's
``response_stats`` (the sink times them; the version's counters are updated on the loop), and,
when the stream has a :class:`~inferd.core.streaming.ResponseBudget`, each one holds a place in
it until the consumer takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.core.inference import InferRequest, InferResponse
from inferd.core.streaming import (
    ResponseBudget,
    ResponseSink,
    ResponseTiming,
    StreamedResponse,
)
from inferd.errors import InferdError
from inferd.repository.manager_types import ServingModel

__all__ = ["StreamEvent", "stream_model"]

Outputs = dict[str, np.ndarray[Any, Any]]


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One response of a stream as the front ends see it; ``response`` is None for a final
    flag that carries no response, ``error`` set for an error response."""

    response: InferResponse | None
    error: InferdError | None
    final: bool
    model_name: str = ""
    model_version: str = ""


async def stream_model(
    model: ServingModel,
    request: InferRequest,
    rows: int,
    budget: ResponseBudget | None = None,
) -> AsyncGenerator[StreamedResponse, None]:
    """Every response of ``model`` to ``request`` (already validated), the last one final.

    With a ``budget``, a decoupled model's response takes a place in it as it is sent (the
    sending thread waits for one, except for the final response) and gives it back when this
    stream yields it."""
    if not model.spec.decoupled:
        outputs = await model.scheduler.submit(request, rows)
        yield StreamedResponse(outputs, None, True)
        return
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()
    queue: asyncio.Queue[StreamedResponse] = asyncio.Queue()
    record = model.stats.record_response
    gone = False  # the consumer left: later responses are not queued

    def consumer_gone() -> bool:
        return gone

    def arrive(item: StreamedResponse | None, timing: ResponseTiming) -> None:  # on the loop
        record(timing)
        if item is None:
            return
        if gone:
            if budget is not None:
                budget.release()
            return
        queue.put_nowait(item)

    def deliver(item: StreamedResponse | None, timing: ResponseTiming) -> None:
        # a final response never waits for room: one per request, and the thread that ends a
        # request may hold locks (a Python worker's reader failing its open requests)
        if (
            item is not None
            and budget is not None
            and not budget.acquire(consumer_gone, wait=not item.final)
        ):
            item = None  # dropped: nobody will read it (counted all the same)
        if threading.get_ident() == loop_thread:
            # sent on the loop (an ensemble answers from its own task): queued at once, so the
            # response is there before the sender's task can end; a later loop turn could come
            # after the stream had seen the task done and the queue empty, and ended it
            arrive(item, timing)
        else:
            loop.call_soon_threadsafe(arrive, item, timing)

    sink = ResponseSink(deliver)
    request.sink = sink
    # the submit runs from the next loop turn: a scheduler checks its state first thing, so a
    # version unloaded in between fails the task at once (unavailable) and the stream ends
    # with that error below rather than waiting for responses that never come
    task = asyncio.ensure_future(model.scheduler.submit(request, rows))
    finished = False

    def waiting() -> bool:
        if not task.done() or not queue.empty():
            return True
        # a backend that adopted the sink answers through it after its batch is over
        return sink.adopted and not task.cancelled() and task.exception() is None

    try:
        while waiting():
            if queue.empty():
                getter = asyncio.ensure_future(queue.get())
                pending = {getter} if task.done() else {getter, task}
                await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                item = getter.result()
            else:
                item = queue.get_nowait()
            if budget is not None:
                budget.release()
            # finished before the yield: a consumer that stops at the final response (closing
            # this generator at the yield) has read the whole stream; nothing is cancelled
            finished = item.final
            yield item
            if finished:
                return
        error = task.exception()
        if error is not None:
            if not isinstance(error, InferdError):
                raise error
            yield StreamedResponse(None, error, True)
        else:
            outputs = task.result()
            yield StreamedResponse(outputs or None, None, True)  # a backend that answered once
        finished = True
    finally:
        gone = True
        if budget is not None:
            budget.release(queue.qsize())
            budget.wake()
        if not finished:
            sink.cancel()
        if not task.done():
            if finished:
                # the model has sent its final response and its execute is ending: let the
                # request complete, so it counts as the success it is, not as a cancellation
                task.add_done_callback(_retrieve)
            else:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an error after the final response has no one to reach
