"""The server's OpenTelemetry tracer: a :class:`~inferd.core.tracing.RequestTracer` over a
tracer provider of its own (never the process-global one).

Requests are sampled as Triton samples them (:mod:`~inferd.monitoring.tracing.sampling`); a
request whose caller sent a W3C ``traceparent`` continues the caller's trace. Spans are built
when the request ends (:mod:`~inferd.monitoring.tracing.spans`), with an event per response
it was answered with, and handed to a batch span processor, whose thread exports them: to a
collector over OTLP/HTTP when a URL is given (``opentelemetry-exporter-otlp-proto-http``),
else as JSON lines to a file or to standard output. The OpenTelemetry packages are imported
only when tracing is on; without them, :func:`require_opentelemetry` names the extra to
install.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from inferd.core.inference import InferRequest
from inferd.core.tracing import RequestTrace, ResponseMark
from inferd.errors import ErrorCode, InferdError
from inferd.monitoring.tracing.sampling import TraceSampler
from inferd.monitoring.tracing.settings import TraceSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor

__all__ = ["CANCELLED", "OtelTracer", "describe_failure", "require_opentelemetry"]

SERVICE_NAME = "inferd"
_MISSING = "--trace-config needs OpenTelemetry: pip install 'inferd[tracing]'"
CANCELLED = "CANCELLED"
_LEFT = "cancelled: the caller left before the last response (closed the stream or disconnected)"


def describe_failure(error: BaseException | None) -> tuple[str, str] | None:
    """How a request's span states ``error``: (status message, ``error.type``), or None for
    a request that did not fail. The caller leaving (the task cancelled, the stream closed
    early) and a model stopping on cancellation are both ``CANCELLED``."""
    if error is None:
        return None
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        return _LEFT, CANCELLED
    if isinstance(error, InferdError):
        code = error.code.name
        message = str(error) or code
        if error.code is ErrorCode.CANCELLED and not message.startswith("cancelled"):
            message = f"cancelled: {message}"
        return message, code
    return str(error) or type(error).__name__, type(error).__name__


def require_opentelemetry(url: str | None = None) -> None:
    """Raise an error naming the extra when the OpenTelemetry SDK (and, for a ``url``, the
    OTLP/HTTP exporter) cannot be imported."""
    try:
        import opentelemetry.sdk.trace  # noqa: F401
        from opentelemetry.trace.propagation import tracecontext  # noqa: F401

        if url is not None:
            from opentelemetry.exporter.otlp.proto.http import trace_exporter  # noqa: F401
    except ImportError:
        raise InferdError(_MISSING) from None


class OtelTracer:
    """Implements :class:`~inferd.core.tracing.RequestTracer`. ``processor`` replaces the
    exporter the settings choose (tests pass the SDK's in-memory exporter in a simple span
    processor)."""

    def __init__(self, settings: TraceSettings, *, processor: SpanProcessor | None = None) -> None:
        require_opentelemetry(settings.url if processor is None else None)
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.settings = settings
        self._file: IO[str] | None = None
        resource = Resource.create({"service.name": SERVICE_NAME, **settings.resource})
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(
            processor if processor is not None else self._batch_processor(settings)
        )
        self._tracer = self._provider.get_tracer("inferd")
        self._propagator = TraceContextTextMapPropagator()
        self._sampler = TraceSampler(settings.rate, settings.count)

    def _batch_processor(self, settings: TraceSettings) -> SpanProcessor:
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )

        exporter: SpanExporter
        if settings.url is not None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=settings.url)
        else:
            if settings.file is not None:
                try:
                    self._file = settings.file.open("a", encoding="utf-8")
                except OSError as exc:
                    raise InferdError(
                        f"--trace-config opentelemetry,file={settings.file}: cannot write it "
                        f"({exc.strerror or exc})"
                    ) from None
            out = self._file if self._file is not None else sys.stdout
            exporter = ConsoleSpanExporter(
                out=out, formatter=lambda span: span.to_json(indent=None) + os.linesep
            )
        return BatchSpanProcessor(
            exporter,
            max_queue_size=settings.bsp_max_queue_size,
            schedule_delay_millis=settings.bsp_schedule_delay_ms,
            max_export_batch_size=settings.bsp_max_export_batch_size,
        )

    def begin(self, request: InferRequest) -> RequestTrace | None:
        context: Any = None
        carrier = request.trace_context
        if carrier:
            from opentelemetry import trace as trace_api

            extracted = self._propagator.extract(carrier)
            if trace_api.get_current_span(extracted).get_span_context().is_valid:
                context = extracted
        if not self._sampler.decide(context is not None):
            return None
        now = time.monotonic_ns()
        return RequestTrace(
            request.model_name, now, time.time_ns() - now, context=context, request_id=request.id
        )

    def responded(
        self, trace: RequestTrace, final: bool, error: InferdError | None, empty: bool = False
    ) -> None:
        message = None if error is None else str(error) or error.code.name
        trace.responses.append(ResponseMark(time.monotonic_ns(), final, message, empty))

    def end(self, trace: RequestTrace, version: str, error: BaseException | None) -> None:
        from inferd.monitoring.tracing.spans import emit

        failure = describe_failure(error)
        if failure is None:
            trace.end(time.monotonic_ns())
        else:
            trace.end(time.monotonic_ns(), *failure)
        if not trace.version:
            trace.version = version
        emit(self._tracer, trace, trace.context)

    def shutdown(self) -> None:
        """Export every pending span, then close the exporter (and its file)."""
        self._provider.shutdown()
        if self._file is not None:
            self._file.close()
            self._file = None
