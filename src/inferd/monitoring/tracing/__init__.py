"""OpenTelemetry traces of inference requests, configured with Triton's ``--trace-config``
flags (docs/observability.md). The OpenTelemetry packages are imported only when tracing is
on (``pip install 'inferd[tracing]'``)."""

from inferd.monitoring.tracing.settings import TraceSettings, parse_trace_config

__all__ = ["TraceSettings", "parse_trace_config"]
