"""``inferd serve``'s payload log and tracing flags, and the settings they make."""

from __future__ import annotations

import argparse
from pathlib import Path

from inferd.errors import InferdError
from inferd.monitoring.payload_log.settings import (
    DEFAULT_MAX_AGE_SECS,
    DEFAULT_MAX_BYTES,
    DEFAULT_QUEUE_BYTES,
    DEFAULT_QUEUE_REQUESTS,
    DEFAULT_ROTATE_BYTES,
    DEFAULT_ROTATE_SECS,
    FORMATS,
    PayloadLogSettings,
    parse_duration_s,
    parse_names,
    parse_rates,
)
from inferd.monitoring.tracing.settings import TraceSettings, parse_trace_config

__all__ = ["add_observability_flags", "payload_log_settings", "trace_settings"]

_PAYLOAD_OPTIONS = (
    ("payload_log_rate", "--payload-log-rate"),
    ("payload_log_models", "--payload-log-models"),
    ("payload_log_redact", "--payload-log-redact"),
    ("payload_log_format", "--payload-log-format"),
    ("payload_log_rotate_bytes", "--payload-log-rotate-bytes"),
    ("payload_log_rotate_secs", "--payload-log-rotate-secs"),
    ("payload_log_queue_size", "--payload-log-queue-size"),
    ("payload_log_queue_bytes", "--payload-log-queue-bytes"),
    ("payload_log_max_bytes", "--payload-log-max-bytes"),
    ("payload_log_max_age", "--payload-log-max-age"),
)


def add_observability_flags(parser: argparse.ArgumentParser) -> None:
    log = parser.add_argument_group(
        "payload log (see docs/observability.md)",
        "Sampled requests and their answers written to rotating files under DIR/<model>/, by a "
        "thread of their own: a request never waits for the log; when the writer falls behind, "
        "sampled requests are dropped and counted (inferd_payload_log_dropped_total).",
    )
    log.add_argument(
        "--payload-log",
        type=Path,
        metavar="DIR",
        help="log answered requests under this folder (created if missing); off by default",
    )
    log.add_argument(
        "--payload-log-rate",
        action="append",
        default=[],
        metavar="[MODEL=]RATE",
        help="share of requests to log, 0 to 1: RATE for every model, MODEL=RATE for one; "
        "repeatable (default: 1)",
    )
    log.add_argument(
        "--payload-log-models",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help="log only these models; repeatable (default: every model)",
    )
    log.add_argument(
        "--payload-log-redact",
        action="append",
        default=[],
        metavar="INPUT[,INPUT]",
        help="inputs never written, whatever the model: the record only says they were "
        "redacted; repeatable",
    )
    log.add_argument(
        "--payload-log-format",
        choices=FORMATS,
        default=None,
        help="jsonl: one v2 JSON object per line, readable while written; parquet: one row "
        "per request, readable once the file is closed (needs pyarrow) (default: jsonl)",
    )
    log.add_argument(
        "--payload-log-rotate-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="start a new file once one holds this many bytes (default: 64 MiB)",
    )
    log.add_argument(
        "--payload-log-rotate-secs",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start a new file once one is this old, even if idle; 0: by size only (default: 3600)",
    )
    log.add_argument(
        "--payload-log-queue-size",
        type=int,
        default=None,
        metavar="N",
        help="sampled requests that may wait for the writer (default: 10000)",
    )
    log.add_argument(
        "--payload-log-queue-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="tensor bytes that may wait for the writer (default: 256 MiB)",
    )
    log.add_argument(
        "--payload-log-max-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="the most all of the log's files (every model's, open ones too) may hold: past "
        "it the oldest closed files are deleted; at least --payload-log-rotate-bytes; 0: no "
        "cap (default: 1 GiB)",
    )
    log.add_argument(
        "--payload-log-max-age",
        default=None,
        metavar="DURATION",
        help="delete a file this long after its last record: seconds, or a number with s, m, "
        "h or d (12h, 7d); 0: kept until the byte cap needs the room (default: 0)",
    )

    trace = parser.add_argument_group(
        "tracing (see docs/observability.md)",
        "OpenTelemetry spans per request (queue, compute and its input/infer/output phases, "
        "each ensemble step), set with tritonserver's --trace-config; a request whose caller "
        "sent a W3C traceparent (HTTP header or gRPC metadata) continues the caller's trace "
        "and is always traced. Needs pip install 'inferd[tracing]'.",
    )
    trace.add_argument(
        "--trace-config",
        action="append",
        default=[],
        metavar="[opentelemetry,]SETTING=VALUE",
        help="repeatable: level=TIMESTAMPS turns tracing on (default OFF); rate=N traces every "
        "N-th request (default 1000; 0: only requests with a traceparent); count=N stops after "
        "N traces (default -1: never); opentelemetry,url=URL exports over OTLP/HTTP, "
        "opentelemetry,file=PATH as JSON lines (neither: standard output); "
        "opentelemetry,resource=KEY=VALUE; opentelemetry,bsp_max_queue_size=N, "
        "bsp_schedule_delay=MS, bsp_max_export_batch_size=N",
    )


def trace_settings(args: argparse.Namespace) -> TraceSettings | None:
    """The tracer's settings, None when tracing is off; with it on, a missing OpenTelemetry
    package is refused here, before the server starts."""
    settings = parse_trace_config(args.trace_config)
    if settings is not None:
        from inferd.monitoring.tracing.otel import require_opentelemetry

        require_opentelemetry(settings.url)
        if settings.file is not None and not settings.file.parent.is_dir():
            raise InferdError(
                f"--trace-config opentelemetry,file={settings.file}: the folder "
                f"{settings.file.parent} does not exist"
            )
    return settings


def payload_log_settings(args: argparse.Namespace) -> PayloadLogSettings | None:
    """The payload log's settings, None when ``--payload-log`` is not given (then every other
    ``--payload-log-*`` flag is refused: it would do nothing)."""
    directory: Path | None = args.payload_log
    if directory is None:
        given = [flag for dest, flag in _PAYLOAD_OPTIONS if getattr(args, dest) not in (None, [])]
        if given:
            raise InferdError(f"{given[0]} needs --payload-log DIR (the folder to log to)")
        return None
    rate, model_rates = parse_rates(args.payload_log_rate)
    return PayloadLogSettings(
        directory=directory,
        rate=1.0 if rate is None else rate,
        model_rates=model_rates,
        models=parse_names(args.payload_log_models, "--payload-log-models", models=True),
        redact=parse_names(args.payload_log_redact, "--payload-log-redact", models=False),
        format=args.payload_log_format or "jsonl",
        rotate_bytes=_int(args.payload_log_rotate_bytes, DEFAULT_ROTATE_BYTES),
        rotate_secs=(
            DEFAULT_ROTATE_SECS
            if args.payload_log_rotate_secs is None
            else float(args.payload_log_rotate_secs)
        ),
        queue_requests=_int(args.payload_log_queue_size, DEFAULT_QUEUE_REQUESTS),
        queue_bytes=_int(args.payload_log_queue_bytes, DEFAULT_QUEUE_BYTES),
        max_bytes=_int(args.payload_log_max_bytes, DEFAULT_MAX_BYTES),
        max_age_secs=(
            DEFAULT_MAX_AGE_SECS
            if args.payload_log_max_age is None
            else parse_duration_s(args.payload_log_max_age, "--payload-log-max-age")
        ),
    )


def _int(value: int | None, default: int) -> int:
    return default if value is None else value
