"""A finished :class:`~inferd.core.tracing.RequestTrace` as OpenTelemetry spans.

The request's span (``InferRequest``, kind SERVER, the caller's span as its parent when the
request carried a trace context) has one child per phase the request went through: ``queue``
(from reaching the model's scheduler to its batch starting) and ``compute``, itself split into
``compute_input``, ``compute_infer`` and ``compute_output`` as the statistics extension splits
it; an ensemble has instead one ``ensemble_step`` child per step, each with its own queue and
compute. Spans carry Triton's attributes (``model_name``, ``model_version``, ``request_id``)
and Triton's timestamp names as events (``REQUEST_START``, ``QUEUE_START``,
``COMPUTE_START``, ``COMPUTE_INPUT_END``, ``COMPUTE_OUTPUT_START``, ``COMPUTE_END``,
``REQUEST_END``). Each response the request was answered with is a ``RESPONSE`` event (its
``index``, ``final`` flag and ``since_request_ns``; ``error`` for an error response, ``empty``
for the final flag alone). A failed request's span has status ERROR with the error's message
and ``error.type`` (the error's code; ``CANCELLED`` for a caller that left early). Times are
converted from the monotonic clock to the wall clock with the offset taken when the trace
began.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.trace import SpanKind, Status, StatusCode

from inferd.core.tracing import RequestTrace

__all__ = ["emit"]


def _span(tracer: Any, name: str, parent: Any, start: int, end: int, **attributes: Any) -> Any:
    span = tracer.start_span(name, context=parent, start_time=start, attributes=attributes or None)
    span.end(end_time=end)
    return span


def _phases(tracer: Any, trace: RequestTrace, parent_span: Any, end_ns: int) -> None:
    """The queue and compute spans of a request that executed (wall-clock ``end_ns`` caps
    them), and Triton's timestamps as events on ``parent_span``."""
    if trace.queue_start_ns is None:
        return
    offset = trace.wall_offset_ns
    queued = trace.queue_start_ns + offset
    started = trace.compute_start_ns + offset
    input_end = started + trace.input_ns
    infer_end = input_end + trace.infer_ns
    finished = min(infer_end + trace.output_ns, max(end_ns, started))
    context = trace_api.set_span_in_context(parent_span)
    _span(tracer, "queue", context, queued, started)
    compute = tracer.start_span(
        "compute", context=context, start_time=started, attributes={"batch_size": trace.batch_rows}
    )
    inner = trace_api.set_span_in_context(compute)
    _span(tracer, "compute_input", inner, started, input_end)
    _span(tracer, "compute_infer", inner, input_end, infer_end)
    _span(tracer, "compute_output", inner, infer_end, finished)
    compute.end(end_time=finished)
    for name, at in (
        ("QUEUE_START", queued),
        ("COMPUTE_START", started),
        ("COMPUTE_INPUT_END", input_end),
        ("COMPUTE_OUTPUT_START", infer_end),
        ("COMPUTE_END", finished),
    ):
        parent_span.add_event(name, timestamp=at)


def _fail(span: Any, error: str | None, error_type: str | None = None) -> None:
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
        if error_type is not None:
            span.set_attribute("error.type", error_type)


def _responses(span: Any, trace: RequestTrace) -> None:
    """A ``RESPONSE`` event on ``span`` per response of ``trace``, in the order sent."""
    for index, mark in enumerate(trace.responses):
        attributes: dict[str, Any] = {
            "index": index,
            "final": mark.final,
            "since_request_ns": mark.at_ns - trace.start_ns,
        }
        if mark.error is not None:
            attributes["error"] = mark.error
        if mark.empty:
            attributes["empty"] = True
        span.add_event("RESPONSE", attributes, timestamp=mark.at_ns + trace.wall_offset_ns)


def emit(tracer: Any, trace: RequestTrace, parent: Any) -> Any:
    """Start and end every span of ``trace`` (its end set); return the request's span."""
    offset = trace.wall_offset_ns
    request_id = trace.request_id
    start = trace.start_ns + offset
    end = (trace.end_ns if trace.end_ns is not None else trace.start_ns) + offset
    root = tracer.start_span(
        "InferRequest",
        context=parent,
        kind=SpanKind.SERVER,
        start_time=start,
        attributes={
            "model_name": trace.model,
            "model_version": trace.version,
            "request_id": request_id,
        },
    )
    root.add_event("REQUEST_START", timestamp=start)
    _phases(tracer, trace, root, end)
    context = trace_api.set_span_in_context(root)
    for step in trace.steps:
        step_start = step.start_ns + offset
        step_end = (
            step.end_ns if step.end_ns is not None else trace.end_ns or step.start_ns
        ) + offset
        span = tracer.start_span(
            "ensemble_step",
            context=context,
            start_time=step_start,
            attributes={
                "model_name": step.model,
                "model_version": step.version,
                "request_id": request_id,
                "step": step.step_index if step.step_index is not None else -1,
            },
        )
        _phases(tracer, step, span, step_end)
        _fail(span, step.error)
        span.end(end_time=step_end)
    _responses(root, trace)
    _fail(root, trace.error, trace.error_type)
    root.add_event("REQUEST_END", timestamp=end)
    root.end(end_time=end)
    return root
