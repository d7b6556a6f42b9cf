"""Request traces through the real serving stack, exported to the SDK's in-memory exporter: the
request span continues the caller's trace, queue and compute (input, infer, output) nest under
it in time, an ensemble has a span per step with its own phases, failures are marked, sampling
follows the rate, a request answered through the engine's stream is traced alike (one decision
per request, a ``RESPONSE`` event per response), and a server without tracing leaves requests
untouched."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from inferd.core.inference import InferRequest
from inferd.errors import NotFoundError
from inferd.monitoring.tracing import TraceSettings
from inferd.monitoring.tracing.otel import OtelTracer
from inferd.repository.manager import ControlMode
from inferd.server.config import ServerConfig
from inferd.server.server import Server
from tests.e2e.test_ensembles import add_sub_step, ensemble_config, write_ensemble
from tests.helpers.models import write_add_sub

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("traced")
    write_add_sub(root, "adder")
    chain = [
        add_sub_step("adder", "INPUT0", "INPUT1", "sum", "diff"),
        add_sub_step("adder", "sum", "diff", "OUTPUT0", "OUTPUT1"),
    ]
    write_ensemble(root, "chain", ensemble_config("chain", chain))
    return root


def config(repo: Path, tracing: TraceSettings | None) -> ServerConfig:
    return ServerConfig(
        model_repositories=(repo,),
        model_control_mode=ControlMode.NONE,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        tracing=tracing,
    )


def request(model: str, traceparent: str | None = None) -> InferRequest:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    req = InferRequest(model, {"INPUT0": a, "INPUT1": a}, id="req-7")
    if traceparent is not None:
        req.trace_context = {"traceparent": traceparent}  # as the front ends set it
    return req


async def traced(repo: Path, settings: TraceSettings, *requests: InferRequest) -> list[Any]:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer(settings, processor=SimpleSpanProcessor(exporter))
    async with Server(config(repo, settings), tracer=tracer) as server:
        assert server.engine.tracing
        for req in requests:
            with contextlib.suppress(NotFoundError):
                await server.engine.infer(req)
    return list(exporter.get_finished_spans())


async def streamed(repo: Path, settings: TraceSettings, *requests: InferRequest) -> list[Any]:
    """:func:`traced`, each request answered through :meth:`Engine.stream_infer`."""
    exporter = InMemorySpanExporter()
    tracer = OtelTracer(settings, processor=SimpleSpanProcessor(exporter))
    async with Server(config(repo, settings), tracer=tracer) as server:
        for req in requests:
            events = server.engine.stream_infer(req)
            async with contextlib.aclosing(events):
                answers = [event async for event in events]
            assert [event.final for event in answers] == [True]
    return list(exporter.get_finished_spans())


def responses(span: ReadableSpan) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == "RESPONSE"]


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> dict[str, ReadableSpan]:
    assert parent.context is not None
    return {
        s.name: s
        for s in spans
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    }


def within(inner: ReadableSpan, outer: ReadableSpan) -> bool:
    assert inner.start_time is not None
    assert inner.end_time is not None
    assert outer.start_time is not None
    assert outer.end_time is not None
    return outer.start_time <= inner.start_time <= inner.end_time <= outer.end_time


async def test_a_request_span_continues_the_callers_trace_with_its_phases(repo: Path) -> None:
    spans = await traced(repo, TraceSettings(rate=0), request("adder", TRACEPARENT))
    (root,) = [s for s in spans if s.name == "InferRequest"]
    assert root.kind is SpanKind.SERVER
    assert root.parent is not None
    assert root.parent.span_id == int(CALLER_SPAN, 16)
    assert root.context is not None
    assert root.context.trace_id == int(TRACE_ID, 16)
    assert dict(root.attributes or {}) == {
        "model_name": "adder",
        "model_version": "1",
        "request_id": "req-7",
    }
    phases = children(spans, root)
    assert set(phases) == {"queue", "compute"}
    compute = phases["compute"]
    assert (compute.attributes or {})["batch_size"] == 1
    inner = children(spans, compute)
    assert set(inner) == {"compute_input", "compute_infer", "compute_output"}
    assert all(within(s, root) for s in phases.values())
    assert all(within(s, compute) for s in inner.values())
    assert phases["queue"].end_time == compute.start_time
    events = [e.name for e in root.events]
    assert events[0] == "REQUEST_START"
    assert events[-1] == "REQUEST_END"
    assert {"QUEUE_START", "COMPUTE_START", "COMPUTE_END"} <= set(events)
    assert all(s.context is not None and s.context.trace_id == int(TRACE_ID, 16) for s in spans)
    assert [(e["index"], e["final"]) for e in responses(root)] == [(0, True)]


async def test_a_streamed_request_is_traced_as_a_unary_one(repo: Path) -> None:
    spans = await streamed(repo, TraceSettings(rate=0), request("adder", TRACEPARENT))
    (root,) = [s for s in spans if s.name == "InferRequest"]
    assert root.parent is not None
    assert root.parent.span_id == int(CALLER_SPAN, 16)
    assert dict(root.attributes or {}) == {
        "model_name": "adder",
        "model_version": "1",
        "request_id": "req-7",
    }
    assert set(children(spans, root)) == {"queue", "compute"}
    (event,) = responses(root)
    assert (event["index"], event["final"]) == (0, True)
    assert event["since_request_ns"] > 0
    assert root.status.status_code is StatusCode.UNSET


async def test_streamed_requests_are_sampled_once_each(repo: Path) -> None:
    spans = await streamed(repo, TraceSettings(rate=2), *(request("adder") for _ in range(5)))
    roots = [s for s in spans if s.name == "InferRequest"]
    assert len(roots) == 2  # the 2nd and 4th of five
    assert all(len(responses(root)) == 1 for root in roots)


async def test_an_ensemble_has_a_span_per_step_with_its_own_phases(repo: Path) -> None:
    spans = await traced(repo, TraceSettings(rate=1), request("chain"))
    (root,) = [s for s in spans if s.name == "InferRequest"]
    assert root.parent is None  # no caller context: a trace of its own
    steps = sorted(
        (s for s in spans if s.name == "ensemble_step"),
        key=lambda s: (s.attributes or {})["step"],
    )
    assert [(s.attributes or {})["step"] for s in steps] == [0, 1]
    for step in steps:
        assert step.parent is not None
        assert root.context is not None
        assert step.parent.span_id == root.context.span_id
        assert (step.attributes or {})["model_name"] == "adder"
        assert (step.attributes or {})["model_version"] == "1"
        assert within(step, root)
        assert set(children(spans, step)) == {"queue", "compute"}
    assert steps[0].end_time is not None
    assert steps[1].start_time is not None
    assert steps[0].end_time <= steps[1].start_time
    assert set(children(spans, root)) == {"ensemble_step"}


async def test_a_failed_request_is_marked_and_sampling_follows_the_rate(repo: Path) -> None:
    requests = [request("adder") for _ in range(5)]
    requests.append(request("missing", TRACEPARENT))
    spans = await traced(repo, TraceSettings(rate=2, count=-1), *requests)
    roots = [s for s in spans if s.name == "InferRequest"]
    assert len(roots) == 3  # the 2nd and 4th of five, and the one with a context
    failed = [r for r in roots if (r.attributes or {})["model_name"] == "missing"]
    assert len(failed) == 1
    assert failed[0].status.status_code is StatusCode.ERROR
    assert "missing" in (failed[0].status.description or "")
    assert (failed[0].attributes or {})["error.type"] == "NOT_FOUND"
    (answer,) = responses(failed[0])  # answered with the error
    assert answer["final"] is True
    assert "missing" in answer["error"]


async def test_without_tracing_requests_carry_no_trace(repo: Path) -> None:
    async with Server(config(repo, None)) as server:
        assert not server.engine.tracing
        req = request("chain", TRACEPARENT)
        await server.engine.infer(req)
        assert req.trace is None
