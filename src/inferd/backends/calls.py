"""Calls from a backend's own threads to other models, run on the server's event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from inferd.core.inference import InferRequest
from inferd.core.streaming import StreamedResponse
from inferd.errors import DeadlineExceededError, InferdError, InternalError

__all__ = ["LoopCalls"]

_log = logging.getLogger(__name__)

Stream = Callable[[InferRequest], AsyncIterator[StreamedResponse]]


class LoopCalls:
    """Implements :class:`inferd.backends.base.ThreadCalls` over an async ``stream`` function
    (every response of the addressed model) and the loop it runs on."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stream: Stream) -> None:
        self._loop = loop
        self._stream = stream

    def start(
        self,
        request: InferRequest,
        deliver: Callable[[StreamedResponse], None],
        *,
        timeout_s: float | None = None,
    ) -> Callable[[], None]:
        future = asyncio.run_coroutine_threadsafe(
            self._run(request, deliver, timeout_s), self._loop
        )

        def cancel() -> None:
            self._loop.call_soon_threadsafe(future.cancel)

        return cancel

    async def _run(
        self,
        request: InferRequest,
        deliver: Callable[[StreamedResponse], None],
        timeout_s: float | None,
    ) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                async for item in self._stream(request):
                    deliver(item)
                    if item.final:
                        return
            deliver(StreamedResponse(None, None, True))
        except TimeoutError:
            deliver(StreamedResponse(None, DeadlineExceededError("Request timeout expired"), True))
        except InferdError as exc:
            deliver(StreamedResponse(None, exc, True))
        except Exception:
            _log.exception("a call to model '%s' failed", request.model_name)
            error = InternalError(f"the call to model '{request.model_name}' failed")
            deliver(StreamedResponse(None, error, True))
