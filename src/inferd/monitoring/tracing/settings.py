"""``--trace-config``, as tritonserver spells it, parsed into the tracer's settings (pure).

Global settings: ``--trace-config level=TIMESTAMPS`` (or ``OFF``), ``rate=N`` (trace every N-th
request; 0: only requests that carry a trace context), ``count=N`` (stop after N traces; -1:
never), ``mode=opentelemetry``. OpenTelemetry settings: ``--trace-config opentelemetry,url=URL``
(OTLP over HTTP), ``opentelemetry,resource=KEY=VALUE`` (repeatable), the batch span processor's
``bsp_max_queue_size``, ``bsp_schedule_delay`` (ms) and ``bsp_max_export_batch_size``, and
inferd's own ``opentelemetry,file=PATH`` (spans as JSON lines when no URL is given; neither:
standard output). Triton's own trace format (``mode=triton``, ``triton,file=...``,
``log-frequency``) and the ``TENSORS`` level are refused with what to use instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from inferd.errors import InvalidArgumentError

__all__ = ["TraceSettings", "parse_trace_config"]

FLAG = "--trace-config"


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """Tracing is on (level TIMESTAMPS) when the server has these settings."""

    rate: int = 1000  # trace every rate-th request; 0: only those with a trace context
    count: int = -1  # traces left to take (-1: no limit); context-carrying requests aside
    url: str | None = None  # OTLP/HTTP endpoint of a collector
    file: Path | None = None  # spans as JSON lines here (when no url)
    resource: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    bsp_max_queue_size: int | None = None  # None: the SDK's default (or OTEL_BSP_* variables)
    bsp_schedule_delay_ms: int | None = None
    bsp_max_export_batch_size: int | None = None

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise InvalidArgumentError(f"{FLAG} rate={self.rate}: give 0 or more")
        if self.count < -1:
            raise InvalidArgumentError(f"{FLAG} count={self.count}: give -1 (no limit) or more")
        if self.url is not None and self.file is not None:
            raise InvalidArgumentError(
                f"{FLAG} opentelemetry,url and opentelemetry,file are both given: spans go to "
                "one exporter, choose one"
            )
        for name in ("bsp_max_queue_size", "bsp_schedule_delay_ms", "bsp_max_export_batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidArgumentError(f"{FLAG} opentelemetry,{name}={value}: give 1 or more")
        queue = self.bsp_max_queue_size if self.bsp_max_queue_size is not None else 2048
        batch = self.bsp_max_export_batch_size
        if batch is not None and batch > queue:
            raise InvalidArgumentError(
                f"{FLAG} opentelemetry,bsp_max_export_batch_size={batch} must not exceed "
                f"bsp_max_queue_size ({queue})"
            )


_GLOBAL = ("level", "rate", "count", "mode")
_OTEL = (
    "url",
    "resource",
    "file",
    "bsp_max_queue_size",
    "bsp_schedule_delay",
    "bsp_max_export_batch_size",
)
_TRITON_FORMAT = (
    "Triton's own trace format (mode=triton, triton,file=..., log-frequency) is not supported: "
    f"inferd traces with OpenTelemetry; use {FLAG} mode=opentelemetry with "
    "opentelemetry,url=URL (OTLP over HTTP) or opentelemetry,file=PATH"
)


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"{FLAG} {what}={value!r}: give a whole number") from None


def _url(value: str) -> str:
    if not value:
        raise InvalidArgumentError(f"{FLAG} opentelemetry,url is empty")
    return value if "://" in value else f"http://{value}"


def parse_trace_config(items: Iterable[str]) -> TraceSettings | None:
    """The settings ``--trace-config`` values make, or None when tracing stays off (no value
    given, or ``level=OFF``). Anything inferd would not honour is refused."""
    values: dict[str, str] = {}
    resource: dict[str, str] = {}
    levels: set[str] = set()
    given = False
    for item in items:
        given = True
        scope, sep, setting = item.partition(",")
        if not sep:
            scope, setting = "", item
        key, eq, value = setting.partition("=")
        key = key.strip()
        if not eq or not key:
            raise InvalidArgumentError(
                f"{FLAG} {item!r}: expected SETTING=VALUE or MODE,SETTING=VALUE"
            )
        if scope == "triton" or (not scope and key == "log-frequency"):
            raise InvalidArgumentError(_TRITON_FORMAT)
        if scope not in ("", "opentelemetry"):
            raise InvalidArgumentError(
                f"{FLAG} {item!r}: unknown trace mode '{scope}' (inferd traces with opentelemetry)"
            )
        known = _OTEL if scope else _GLOBAL
        if key not in known:
            raise InvalidArgumentError(
                f"{FLAG} {item!r}: unknown setting '{key}'; "
                + ("opentelemetry," if scope else "")
                + "settings are "
                + ", ".join(known)
            )
        if key == "level":
            level = value.upper()
            if level == "TENSORS":
                raise InvalidArgumentError(
                    f"{FLAG} level=TENSORS is not supported with OpenTelemetry (as in Triton): "
                    "use level=TIMESTAMPS, and the payload log (--payload-log) for tensors"
                )
            if level not in ("TIMESTAMPS", "OFF"):
                raise InvalidArgumentError(f"{FLAG} level={value!r}: use TIMESTAMPS or OFF")
            levels.add(level)
            continue
        if key == "resource":
            name, is_pair, attribute = value.partition("=")
            if not is_pair or not name:
                raise InvalidArgumentError(
                    f"{FLAG} opentelemetry,resource={value!r}: expected KEY=VALUE"
                )
            resource[name] = attribute
            continue
        if key in values:
            raise InvalidArgumentError(f"{FLAG} gives '{key}' twice")
        values[key] = value
    if not given:
        return None
    mode = values.pop("mode", "opentelemetry")
    if mode == "triton":
        raise InvalidArgumentError(_TRITON_FORMAT)
    if mode != "opentelemetry":
        raise InvalidArgumentError(f"{FLAG} mode={mode!r}: inferd traces with opentelemetry")
    if levels == {"TIMESTAMPS", "OFF"}:
        raise InvalidArgumentError(f"{FLAG} gives level=TIMESTAMPS and level=OFF: choose one")
    if "OFF" in levels:
        return None  # explicitly off: the other settings stay unused on purpose
    if not levels:
        raise InvalidArgumentError(
            f"{FLAG} settings are given but tracing is off: add {FLAG} level=TIMESTAMPS "
            "(or level=OFF to keep it off)"
        )
    file = values.get("file")
    if file == "":
        raise InvalidArgumentError(f"{FLAG} opentelemetry,file is empty")
    return TraceSettings(
        rate=_int(values["rate"], "rate") if "rate" in values else 1000,
        count=_int(values["count"], "count") if "count" in values else -1,
        url=_url(values["url"]) if "url" in values else None,
        file=Path(file) if file else None,
        resource=MappingProxyType(resource),
        bsp_max_queue_size=_optional(values, "bsp_max_queue_size"),
        bsp_schedule_delay_ms=_optional(values, "bsp_schedule_delay"),
        bsp_max_export_batch_size=_optional(values, "bsp_max_export_batch_size"),
    )


def _optional(values: Mapping[str, str], key: str) -> int | None:
    return _int(values[key], f"opentelemetry,{key}") if key in values else None
