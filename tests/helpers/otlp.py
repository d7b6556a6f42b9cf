"""An OTLP/HTTP trace collector for tests: a real HTTP server on an ephemeral port that decodes
every export the server sends to ``/v1/traces`` and lets a test wait for a request's span."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def value_of(any_value: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value (the kinds span attributes use)."""
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs}


@dataclass
class Collected:
    """The spans a collector received; ``changed`` is notified on each export."""

    spans: list[Any] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def request_span(self, request_id: str, timeout_s: float = 30.0) -> Any:
        """The ``InferRequest`` span of ``request_id``, once it arrived."""
        with self.changed:
            found = self.changed.wait_for(
                lambda: self._find(request_id) is not None, timeout=timeout_s
            )
            assert found, f"no span for request '{request_id}' within {timeout_s} s"
            return self._find(request_id)

    def _find(self, request_id: str) -> Any:
        for span in self.spans:
            if span.name == "InferRequest" and (
                attributes(span.attributes).get("request_id") == request_id
            ):
                return span
        return None

    def has_request(self, request_id: str) -> bool:
        with self.changed:
            return self._find(request_id) is not None

    def children(self, parent: Any) -> list[Any]:
        with self.changed:
            return [s for s in self.spans if s.parent_span_id == parent.span_id]


class _Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            export = ExportTraceServiceRequest.FromString(body)
            collected: Collected = self.server.collected  # type: ignore[attr-defined]
            with collected.changed:
                for resource in export.resource_spans:
                    for scope in resource.scope_spans:
                        collected.spans.extend(scope.spans)
                collected.changed.notify_all()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def otlp_collector() -> Iterator[tuple[str, Collected]]:
    """A running collector: its ``host:port/v1/traces`` endpoint and what it received."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    collected = Collected()
    server.collected = collected  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}/v1/traces", collected
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
