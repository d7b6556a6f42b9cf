"""What one traced request went through, recorded where it happens and turned into spans when
it ends.

The engine asks its :class:`RequestTracer` (if the server has one) whether to trace a request;
a traced request carries a :class:`RequestTrace` (``InferRequest.trace``). The instance pool
records the request's queue and compute times into it (one ``is not None`` check per request
when tracing is off), an ensemble opens a child trace per step, and when the request ends the
tracer turns the record into spans. A request answered as a stream (or any number of
responses) is traced alike: the engine notes each response as it hands it to the front end
(:meth:`RequestTracer.responded`), and a stream left before its final response ends as
cancelled. Everything here runs on the event loop; times are monotonic nanoseconds, with the
offset to the wall clock taken when the trace began.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from inferd.core.inference import InferRequest
    from inferd.errors import InferdError

__all__ = ["RequestTrace", "RequestTracer", "ResponseMark"]


class ResponseMark(NamedTuple):
    """One response of a traced request, as the engine handed it to the front end."""

    at_ns: int
    final: bool
    error: str | None = None  # an error response: its message
    empty: bool = False  # the final flag alone, without a response


class RequestTrace:
    """One request, or one ensemble step of a traced request."""

    __slots__ = (
        "batch_rows",
        "compute_start_ns",
        "context",
        "end_ns",
        "error",
        "error_type",
        "infer_ns",
        "input_ns",
        "model",
        "output_ns",
        "queue_start_ns",
        "request_id",
        "responses",
        "start_ns",
        "step_index",
        "steps",
        "version",
        "wall_offset_ns",
    )

    def __init__(
        self,
        model: str,
        start_ns: int,
        wall_offset_ns: int,
        *,
        context: Any = None,
        step_index: int | None = None,
        request_id: str = "",
    ) -> None:
        self.model = model
        self.request_id = request_id
        self.version = ""
        self.start_ns = start_ns
        self.end_ns: int | None = None
        self.wall_offset_ns = wall_offset_ns  # wall clock minus monotonic clock, in ns
        self.context = context  # the tracer's: the caller's trace context, if any
        self.step_index = step_index
        self.queue_start_ns: int | None = None  # set once the request executed
        self.compute_start_ns = 0
        self.input_ns = 0
        self.infer_ns = 0
        self.output_ns = 0
        self.batch_rows = 0
        self.steps: list[RequestTrace] = []
        self.responses: list[ResponseMark] = []
        self.error: str | None = None
        self.error_type: str | None = None  # the error's kind (its code), when known

    def executed(
        self,
        version: str,
        queued_ns: int,
        started_ns: int,
        input_ns: int,
        infer_ns: int,
        output_ns: int,
        batch_rows: int,
    ) -> None:
        """The request reached its model's scheduler at ``queued_ns``, its batch of
        ``batch_rows`` rows started at ``started_ns`` and took these phases, in order."""
        self.version = version
        self.queue_start_ns = queued_ns
        self.compute_start_ns = started_ns
        self.input_ns = input_ns
        self.infer_ns = infer_ns
        self.output_ns = output_ns
        self.batch_rows = batch_rows

    def step(self, index: int, model: str, now_ns: int) -> RequestTrace:
        """A child trace for ensemble step ``index``, on ``model``, starting now."""
        child = RequestTrace(
            model, now_ns, self.wall_offset_ns, step_index=index, request_id=self.request_id
        )
        self.steps.append(child)
        return child

    def end(self, now_ns: int, error: str | None = None, error_type: str | None = None) -> None:
        self.end_ns = now_ns
        self.error = error
        self.error_type = error_type


class RequestTracer(Protocol):
    def begin(self, request: InferRequest) -> RequestTrace | None:
        """A trace for ``request`` if it is to be traced (sampling, the caller's context)."""
        ...

    def responded(
        self, trace: RequestTrace, final: bool, error: InferdError | None, empty: bool = False
    ) -> None:
        """``trace``'s request has a response now (an error response when ``error``; the
        final flag alone when ``empty``)."""
        ...

    def end(self, trace: RequestTrace, version: str, error: BaseException | None) -> None:
        """``trace``'s request ended (answered by ``version``, or failed with ``error``; a
        cancellation, ``asyncio.CancelledError`` or ``GeneratorExit`` included, ends it as
        cancelled)."""
        ...

    def shutdown(self) -> None:
        """Export what is pending and release the exporter (the server is stopping)."""
        ...
