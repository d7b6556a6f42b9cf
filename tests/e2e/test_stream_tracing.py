"""Streamed requests traced like unary ones: ``inferd serve --trace-config`` exporting to a real
OTLP/HTTP collector. A request of a gRPC ``ModelStreamInfer`` stream (decoupled or not) and of
HTTP ``generate`` / ``generate_stream`` gets the request span with its queue and compute
children, continues the caller's ``traceparent`` (the stream's metadata, the HTTP header), holds
one ``RESPONSE`` event per response, and ends as ERROR for an error response or as cancelled
when the client leaves early. With ``rate=0`` a request without a trace context is not traced,
streamed or not."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from tritonclient.utils import InferenceServerException

from inferd.examples.simple_models import build_simple
from inferd.examples.streaming_models import build_streaming
from inferd.testing import ServerProcess, running_server
from tests.helpers.otlp import Collected, attributes, otlp_collector

pytestmark = pytest.mark.e2e

TRACE_GRPC = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_HTTP = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Collected]]:
    repo = tmp_path_factory.mktemp("stream-tracing") / "models"
    build_streaming("repeat_int32", repo / "repeat_int32")
    build_simple("simple", repo / "simple")
    with otlp_collector() as (url, collected):
        args = [
            "--trace-config=level=TIMESTAMPS",
            "--trace-config=rate=0",  # only requests that carry a trace context
            f"--trace-config=opentelemetry,url={url}",
            "--trace-config=opentelemetry,bsp_schedule_delay=20",
        ]
        with running_server([repo], args) as server:
            yield server, collected


def _traceparent(trace_id: str) -> dict[str, str]:
    return {"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"}


def _repeat(values: list[int], delay_us: int, delays: int | None = None) -> list[Any]:
    data = {
        "IN": np.array(values, dtype=np.int32),
        "DELAY": np.full(len(values) if delays is None else delays, delay_us, dtype=np.uint32),
        "WAIT": np.zeros(1, dtype=np.uint32),
    }
    inputs = []
    for name, array in data.items():
        item = grpcclient.InferInput(name, list(array.shape), "INT32" if name == "IN" else "UINT32")
        item.set_data_from_numpy(array)
        inputs.append(item)
    return inputs


def _simple() -> list[Any]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(a)
    return inputs


def _responses(span: Any) -> list[dict[str, Any]]:
    """The ``RESPONSE`` events of ``span``, each its attributes plus ``at`` (ns)."""
    return [
        {**attributes(e.attributes), "at": e.time_unix_nano}
        for e in span.events
        if e.name == "RESPONSE"
    ]


def _check_parent(span: Any, trace_id: str) -> None:
    assert span.trace_id.hex() == trace_id
    assert span.parent_span_id.hex() == CLIENT_SPAN
    assert span.kind == Span.SPAN_KIND_SERVER


def test_a_grpc_stream_traces_each_request_with_an_event_per_response(
    traced: tuple[ServerProcess, Collected],
) -> None:
    server, collected = traced
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(
            callback=lambda result, error: results.put(error or result),
            headers=_traceparent(TRACE_GRPC),
        )
        client.async_stream_infer(
            "repeat_int32",
            _repeat([7, 8, 9], 2000),
            request_id="grpc-decoupled",
            enable_empty_final_response=True,
        )
        client.async_stream_infer("simple", _simple(), request_id="grpc-ordinary")
        client.async_stream_infer("repeat_int32", _repeat([1, 2], 0, 1), request_id="grpc-error")
        got = [results.get(timeout=30) for _ in range(4 + 1 + 1)]
        client.stop_stream()
    assert sum(isinstance(item, InferenceServerException) for item in got) == 1

    decoupled = collected.request_span("grpc-decoupled")
    _check_parent(decoupled, TRACE_GRPC)
    assert attributes(decoupled.attributes) == {
        "model_name": "repeat_int32",
        "model_version": "1",
        "request_id": "grpc-decoupled",
    }
    assert decoupled.status.code == Status.STATUS_CODE_UNSET
    events = _responses(decoupled)
    assert [e["index"] for e in events] == [0, 1, 2, 3]
    assert [e["final"] for e in events] == [False, False, False, True]
    assert [e.get("empty", False) for e in events] == [False, False, False, True]
    since = [e["since_request_ns"] for e in events]
    assert since == sorted(since)
    assert since[0] > 0
    assert all(
        decoupled.start_time_unix_nano <= e["at"] <= decoupled.end_time_unix_nano for e in events
    )
    assert {s.name for s in collected.children(decoupled)} == {"queue", "compute"}

    ordinary = collected.request_span("grpc-ordinary")
    _check_parent(ordinary, TRACE_GRPC)
    assert [(e["index"], e["final"]) for e in _responses(ordinary)] == [(0, True)]
    assert {s.name for s in collected.children(ordinary)} == {"queue", "compute"}

    failed = collected.request_span("grpc-error")
    _check_parent(failed, TRACE_GRPC)
    assert failed.status.code == Status.STATUS_CODE_ERROR
    assert "DELAY has 1 elements but IN has 2" in failed.status.message
    assert attributes(failed.attributes)["error.type"] == "INVALID_ARGUMENT"
    (event,) = _responses(failed)
    assert event["final"] is True
    assert "DELAY has 1 elements" in event["error"]


def test_a_grpc_stream_closed_early_ends_as_cancelled(
    traced: tuple[ServerProcess, Collected],
) -> None:
    server, collected = traced
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(
            callback=lambda result, error: results.put(error or result),
            headers=_traceparent(TRACE_GRPC),
        )
        client.async_stream_infer(
            "repeat_int32", _repeat(list(range(100)), 20_000), request_id="grpc-left"
        )
        for _ in range(2):
            assert not isinstance(results.get(timeout=30), InferenceServerException)
        client.stop_stream(cancel_requests=True)
    span = collected.request_span("grpc-left")
    _check_parent(span, TRACE_GRPC)
    assert span.status.code == Status.STATUS_CODE_ERROR
    assert span.status.message.startswith("cancelled")
    assert attributes(span.attributes)["error.type"] == "CANCELLED"
    events = _responses(span)
    assert 2 <= len(events) < 100
    assert [e["index"] for e in events] == list(range(len(events)))
    assert not any(e["final"] for e in events)


def _sse(text: str) -> list[Any]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def test_http_generate_and_generate_stream_continue_the_callers_trace(
    traced: tuple[ServerProcess, Collected],
) -> None:
    server, collected = traced
    body = {"IN": [4, 5], "DELAY": [1000, 1000], "WAIT": 0}
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as client:
        untraced = client.post(
            "/v2/models/repeat_int32/generate_stream", json={**body, "id": "http-untraced"}
        )
        assert [e["OUT"] for e in _sse(untraced.text)] == [4, 5]
        reply = client.post(
            "/v2/models/repeat_int32/generate_stream",
            json={**body, "id": "http-stream"},
            headers=_traceparent(TRACE_HTTP),
        )
        assert [e["OUT"] for e in _sse(reply.text)] == [4, 5]
        once = client.post(
            "/v2/models/simple/generate",
            json={"id": "http-once", "INPUT0": list(range(16)), "INPUT1": [1] * 16},
            headers=_traceparent(TRACE_HTTP),
        )
        assert once.status_code == 200, once.text

    stream = collected.request_span("http-stream")
    _check_parent(stream, TRACE_HTTP)
    events = _responses(stream)
    assert [(e["index"], e["final"], e.get("empty", False)) for e in events] == [
        (0, False, False),
        (1, False, False),
        (2, True, True),
    ]
    assert {s.name for s in collected.children(stream)} == {"queue", "compute"}
    generate = collected.request_span("http-once")
    _check_parent(generate, TRACE_HTTP)
    assert [(e["index"], e["final"]) for e in _responses(generate)] == [(0, True)]
    # rate=0: the request without a trace context, answered before these, was not traced
    assert not collected.has_request("http-untraced")


def test_an_http_client_leaving_generate_stream_ends_it_as_cancelled(
    traced: tuple[ServerProcess, Collected],
) -> None:
    server, collected = traced
    body = {"id": "http-left", "IN": list(range(100)), "DELAY": [20_000] * 100, "WAIT": 0}
    with (
        httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as client,
        client.stream(
            "POST",
            "/v2/models/repeat_int32/generate_stream",
            json=body,
            headers=_traceparent(TRACE_HTTP),
        ) as reply,
    ):
        lines = reply.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
    span = collected.request_span("http-left")
    _check_parent(span, TRACE_HTTP)
    assert span.status.code == Status.STATUS_CODE_ERROR
    assert attributes(span.attributes)["error.type"] == "CANCELLED"
    events = _responses(span)
    assert 1 <= len(events) < 100
    assert not any(e["final"] for e in events)
