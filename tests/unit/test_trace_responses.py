"""A traced request's responses and its end as OpenTelemetry sees them: one ``RESPONSE``
event per response (index, final flag, time since the request, an error's message, the final
flag alone marked empty), and the status a failure or a cancellation gives the request span."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from inferd.core.inference import InferRequest
from inferd.core.tracing import RequestTrace, ResponseMark
from inferd.errors import InvalidArgumentError, NotFoundError, RequestCancelledError
from inferd.monitoring.tracing import TraceSettings
from inferd.monitoring.tracing.otel import CANCELLED, OtelTracer, describe_failure
from inferd.monitoring.tracing.spans import emit

OFFSET = 1_700_000_000_000_000_000


def _root(spans: Any) -> Any:
    (root,) = [s for s in spans if s.name == "InferRequest"]
    return root


def _emitted(trace: RequestTrace) -> Any:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    emit(provider.get_tracer("test"), trace, None)
    return _root(exporter.get_finished_spans())


def test_each_response_is_an_event_in_the_order_sent() -> None:
    trace = RequestTrace("repeat", 1_000, OFFSET, request_id="r")
    trace.responses += [
        ResponseMark(1_500, False),
        ResponseMark(2_500, False, "bad element"),
        ResponseMark(4_000, True, empty=True),
    ]
    trace.end(5_000)
    root = _emitted(trace)
    events = [e for e in root.events if e.name == "RESPONSE"]
    assert [dict(e.attributes or {}) for e in events] == [
        {"index": 0, "final": False, "since_request_ns": 500},
        {"index": 1, "final": False, "since_request_ns": 1_500, "error": "bad element"},
        {"index": 2, "final": True, "since_request_ns": 3_000, "empty": True},
    ]
    assert [e.timestamp for e in events] == [OFFSET + 1_500, OFFSET + 2_500, OFFSET + 4_000]
    names = [e.name for e in root.events]
    assert names[0] == "REQUEST_START"
    assert names[-1] == "REQUEST_END"
    assert root.status.status_code is StatusCode.UNSET
    assert "error.type" not in (root.attributes or {})


def test_a_failed_request_has_its_message_and_error_type() -> None:
    trace = RequestTrace("repeat", 1_000, OFFSET)
    trace.end(2_000, "cancelled: the caller left", CANCELLED)
    root = _emitted(trace)
    assert root.status.status_code is StatusCode.ERROR
    assert root.status.description == "cancelled: the caller left"
    assert (root.attributes or {})["error.type"] == "CANCELLED"
    assert not [e for e in root.events if e.name == "RESPONSE"]


@pytest.mark.parametrize(
    ("error", "message", "kind"),
    [
        (asyncio.CancelledError(), "cancelled: the caller left", "CANCELLED"),
        (GeneratorExit(), "cancelled: the caller left", "CANCELLED"),
        (RequestCancelledError("the model stopped"), "cancelled: the model stopped", "CANCELLED"),
        (RequestCancelledError("cancelled by the client"), "cancelled by the client", "CANCELLED"),
        (NotFoundError("unknown model 'x'"), "unknown model 'x'", "NOT_FOUND"),
        (InvalidArgumentError(""), "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
        (ValueError(), "ValueError", "ValueError"),
    ],
)
def test_failures_are_described_by_kind(error: BaseException, message: str, kind: str) -> None:
    described = describe_failure(error)
    assert described is not None
    assert described[0].startswith(message)
    assert described[1] == kind


def test_no_failure_is_described_as_none() -> None:
    assert describe_failure(None) is None


def test_the_tracer_notes_responses_and_ends_a_stream_left_early_as_cancelled() -> None:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer(TraceSettings(rate=1), processor=SimpleSpanProcessor(exporter))
    try:
        trace = tracer.begin(InferRequest("repeat", {}, id="left"))
        assert trace is not None
        tracer.responded(trace, False, None)
        tracer.responded(trace, False, InvalidArgumentError("element 1 is negative"))
        tracer.end(trace, "3", GeneratorExit())
    finally:
        tracer.shutdown()
    root = _root(exporter.get_finished_spans())
    assert (root.attributes or {})["model_version"] == "3"
    assert (root.attributes or {})["error.type"] == "CANCELLED"
    assert root.status.status_code is StatusCode.ERROR
    events = [dict(e.attributes or {}) for e in root.events if e.name == "RESPONSE"]
    assert [(e["index"], e["final"], e.get("error")) for e in events] == [
        (0, False, None),
        (1, False, "element 1 is negative"),
    ]
    assert 0 <= events[0]["since_request_ns"] <= events[1]["since_request_ns"]
