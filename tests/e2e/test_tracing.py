"""``inferd serve --trace-config``: a W3C ``traceparent`` sent by tritonclient (an HTTP header,
gRPC metadata) makes the server's request span a child of the client's span, in the client's
trace; with ``rate=0`` a request without one is not traced. Spans are read from the JSON lines
the file exporter writes."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import running_server

pytestmark = pytest.mark.e2e

TRACE_HTTP = "0af7651916cd43dd8448eb211c80319c"
TRACE_GRPC = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "b7ad6b7169203331"


def _inputs(module: Any) -> list[Any]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32")]
    inputs.append(module.InferInput("INPUT1", [1, 16], "INT32"))
    for item in inputs:
        item.set_data_from_numpy(a)
    return inputs


def test_the_callers_traceparent_is_the_parent_of_the_server_span(
    example_repo: Path, tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    args = [
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--trace-config=mode=opentelemetry",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=0",
        f"--trace-config=opentelemetry,file={spans_file}",
        "--trace-config=opentelemetry,resource=service.name=ranker",
    ]
    with running_server([example_repo], args) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        http.infer(
            "simple",
            _inputs(httpclient),
            request_id="traced-http",
            headers={"traceparent": f"00-{TRACE_HTTP}-{CLIENT_SPAN}-01"},
        )
        grpc.infer(
            "simple",
            _inputs(grpcclient),
            request_id="traced-grpc",
            headers={"traceparent": f"00-{TRACE_GRPC}-{CLIENT_SPAN}-01"},
        )
        http.infer("simple", _inputs(httpclient), request_id="untraced")  # rate=0: not traced
        http.close()
        grpc.close()
    # the server flushed its spans when it stopped
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    roots = {s["attributes"]["request_id"]: s for s in spans if s["name"] == "InferRequest"}
    assert set(roots) == {"traced-http", "traced-grpc"}
    for request_id, trace_id in (("traced-http", TRACE_HTTP), ("traced-grpc", TRACE_GRPC)):
        root = roots[request_id]
        assert root["context"]["trace_id"] == f"0x{trace_id}"
        assert root["parent_id"] == f"0x{CLIENT_SPAN}"
        assert root["kind"] == "SpanKind.SERVER"
        assert root["attributes"]["model_name"] == "simple"
        assert root["resource"]["attributes"]["service.name"] == "ranker"
        span_id = root["context"]["span_id"]
        names = {s["name"] for s in spans if s["parent_id"] == span_id}
        assert names == {"queue", "compute"}


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: keeps the body of every POST to /v1/traces."""

    bodies: list[bytes]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            self.server.bodies.append(body)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_spans_go_to_an_otlp_collector_over_http(example_repo: Path) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    collector.bodies = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=collector.serve_forever, daemon=True)
    thread.start()
    port = collector.server_address[1]
    args = [
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
        "--trace-config=count=1",
        f"--trace-config=opentelemetry,url=127.0.0.1:{port}/v1/traces",
    ]
    try:
        with running_server([example_repo], args) as server:
            client = httpclient.InferenceServerClient(server.http_url)
            client.infer(
                "simple",
                _inputs(httpclient),
                request_id="to-collector",
                headers={"traceparent": f"00-{TRACE_HTTP}-{CLIENT_SPAN}-01"},
            )
            client.infer("simple", _inputs(httpclient), request_id="first-sampled")
            client.infer("simple", _inputs(httpclient), request_id="past-the-count")
            client.close()
    finally:
        collector.shutdown()
        collector.server_close()
    spans = []
    for body in collector.bodies:  # type: ignore[attr-defined]
        export = ExportTraceServiceRequest.FromString(body)
        for resource in export.resource_spans:
            for scope in resource.scope_spans:
                spans.extend(scope.spans)
    roots = {
        next(a.value.string_value for a in s.attributes if a.key == "request_id"): s
        for s in spans
        if s.name == "InferRequest"
    }
    assert set(roots) == {"to-collector", "first-sampled"}
    assert roots["to-collector"].parent_span_id.hex() == CLIENT_SPAN
    assert roots["to-collector"].trace_id.hex() == TRACE_HTTP
    assert roots["first-sampled"].parent_span_id == b""
