"""``--trace-config`` as tritonserver spells it: what is honoured, what is refused and why, and
Triton's sampling rule (every N-th request, a count, callers' contexts always)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from inferd.errors import InferdError, InvalidArgumentError
from inferd.monitoring.tracing import TraceSettings, parse_trace_config
from inferd.monitoring.tracing.otel import require_opentelemetry
from inferd.monitoring.tracing.sampling import TraceSampler


def test_no_flag_or_level_off_leaves_tracing_off() -> None:
    assert parse_trace_config([]) is None
    assert parse_trace_config(["level=OFF", "rate=1"]) is None


def test_every_setting_is_read() -> None:
    settings = parse_trace_config(
        [
            "mode=opentelemetry",
            "level=TIMESTAMPS",
            "rate=5",
            "count=100",
            "opentelemetry,url=collector:4318/v1/traces",
            "opentelemetry,resource=service.name=ranker",
            "opentelemetry,resource=deployment.environment=prod",
            "opentelemetry,bsp_max_queue_size=100",
            "opentelemetry,bsp_schedule_delay=250",
            "opentelemetry,bsp_max_export_batch_size=10",
        ]
    )
    assert settings == TraceSettings(
        rate=5,
        count=100,
        url="http://collector:4318/v1/traces",
        resource={"service.name": "ranker", "deployment.environment": "prod"},
        bsp_max_queue_size=100,
        bsp_schedule_delay_ms=250,
        bsp_max_export_batch_size=10,
    )
    defaults = parse_trace_config(["level=timestamps", "opentelemetry,file=/tmp/spans.jsonl"])
    assert defaults == TraceSettings(file=Path("/tmp/spans.jsonl"))


@pytest.mark.parametrize(
    ("items", "words"),
    [
        (["rate=10"], "add --trace-config level=TIMESTAMPS"),
        (["level=TENSORS"], "TENSORS is not supported with OpenTelemetry"),
        (["level=LOUD"], "use TIMESTAMPS or OFF"),
        (["level=TIMESTAMPS", "level=OFF"], "choose one"),
        (["level=TIMESTAMPS", "mode=triton"], "Triton's own trace format"),
        (["level=TIMESTAMPS", "triton,file=/tmp/t.json"], "Triton's own trace format"),
        (["level=TIMESTAMPS", "log-frequency=50"], "Triton's own trace format"),
        (["level=TIMESTAMPS", "mode=zipkin"], "traces with opentelemetry"),
        (["level=TIMESTAMPS", "jaeger,url=x"], "unknown trace mode 'jaeger'"),
        (["level=TIMESTAMPS", "sample=3"], "unknown setting 'sample'"),
        (["level=TIMESTAMPS", "opentelemetry,rate=3"], "unknown setting 'rate'"),
        (["level=TIMESTAMPS", "rate=1", "rate=2"], "gives 'rate' twice"),
        (["level=TIMESTAMPS", "rate=often"], "give a whole number"),
        (["level=TIMESTAMPS", "rate=-1"], "give 0 or more"),
        (["level=TIMESTAMPS", "count=-2"], "give -1"),
        (["level=TIMESTAMPS", "opentelemetry,resource=novalue"], "expected KEY=VALUE"),
        (["level=TIMESTAMPS", "opentelemetry,url="], "url is empty"),
        (["level=TIMESTAMPS", "opentelemetry,file="], "file is empty"),
        (["level=TIMESTAMPS", "opentelemetry,url=x", "opentelemetry,file=y"], "choose one"),
        (["level=TIMESTAMPS", "opentelemetry,bsp_max_export_batch_size=4096"], "must not exceed"),
        (["level=TIMESTAMPS", "opentelemetry,bsp_schedule_delay=0"], "give 1 or more"),
        (["TIMESTAMPS"], "expected SETTING=VALUE"),
    ],
)
def test_what_inferd_would_not_honour_is_refused(items: list[str], words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        parse_trace_config(items)


def test_a_missing_opentelemetry_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    require_opentelemetry("http://collector:4318/v1/traces")  # installed here
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http", None)
    with pytest.raises(InferdError, match=r"pip install 'inferd\[tracing\]'"):
        require_opentelemetry("http://collector:4318/v1/traces")
    require_opentelemetry(None)  # a file or standard output needs only the SDK


def test_every_nth_request_until_the_count_and_contexts_always() -> None:
    sampler = TraceSampler(rate=3, count=2)
    decisions = [sampler.decide(False) for _ in range(12)]
    assert decisions == [False, False, True, False, False, True] + [False] * 6
    assert sampler.decide(True)  # a caller's context: traced past the count
    only_contexts = TraceSampler(rate=0, count=-1)
    assert [only_contexts.decide(False) for _ in range(5)] == [False] * 5
    assert only_contexts.decide(True)
    every = TraceSampler(rate=1, count=-1)
    assert all(every.decide(False) for _ in range(100))
