"""The payload log's settings, checked once when the server configuration is built, and the
pure parsers of the ``--payload-log-*`` flags' values."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from inferd.core.names import check_model_name
from inferd.errors import InferdError, InvalidArgumentError

__all__ = [
    "DEFAULT_MAX_AGE_SECS",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_QUEUE_BYTES",
    "DEFAULT_QUEUE_REQUESTS",
    "DEFAULT_ROTATE_BYTES",
    "DEFAULT_ROTATE_SECS",
    "FORMATS",
    "PayloadLogSettings",
    "parse_duration_s",
    "parse_names",
    "parse_rates",
]

FORMATS = ("jsonl", "parquet")
MIB = 1024 * 1024
DEFAULT_ROTATE_BYTES = 64 * MIB
DEFAULT_ROTATE_SECS = 3600.0
DEFAULT_QUEUE_REQUESTS = 10_000
DEFAULT_QUEUE_BYTES = 256 * MIB
DEFAULT_MAX_BYTES = 1024 * MIB
DEFAULT_MAX_AGE_SECS = 0.0  # kept until the byte cap needs the room


@dataclass(frozen=True, slots=True)
class PayloadLogSettings:
    """Where and what the payload log writes.

    ``rate`` is the share of a model's answered requests that are logged (0..1), unless
    ``model_rates`` names the model; ``models`` (empty: every model) limits logging to those
    models; inputs named in ``redact`` are never written, only marked as redacted. A file is
    closed and a new one started once it holds ``rotate_bytes`` or is ``rotate_secs`` old (0:
    only by size). At most ``queue_requests`` sampled requests holding about ``queue_bytes`` of
    tensors wait for the writer; beyond that a sampled request is dropped and counted.

    Retention: the log's files (over every model) hold at most ``max_bytes`` (0: no cap), and
    a closed file is kept at most ``max_age_secs`` after its last record (0: no age limit);
    the oldest go first (:mod:`~inferd.monitoring.payload_log.retention`).
    """

    directory: Path
    rate: float = 1.0
    model_rates: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    models: frozenset[str] = frozenset()
    redact: frozenset[str] = frozenset()
    format: str = "jsonl"
    rotate_bytes: int = DEFAULT_ROTATE_BYTES
    rotate_secs: float = DEFAULT_ROTATE_SECS
    queue_requests: int = DEFAULT_QUEUE_REQUESTS
    queue_bytes: int = DEFAULT_QUEUE_BYTES
    max_bytes: int = DEFAULT_MAX_BYTES
    max_age_secs: float = DEFAULT_MAX_AGE_SECS
    flush_secs: float = 0.1  # how long the writer lets sampled requests gather before writing

    def __post_init__(self) -> None:
        _check_rate(self.rate, "--payload-log-rate")
        for model, rate in self.model_rates.items():
            _check_rate(rate, f"--payload-log-rate {model}=")
            if self.models and model not in self.models:
                raise InvalidArgumentError(
                    f"--payload-log-rate {model}={rate} names a model that --payload-log-models "
                    "leaves out: add it there or drop the rate"
                )
        if self.format not in FORMATS:
            raise InvalidArgumentError(
                f"--payload-log-format {self.format!r} is not supported: use one of "
                + ", ".join(FORMATS)
            )
        if self.rotate_bytes < 1024:
            raise InvalidArgumentError("--payload-log-rotate-bytes must be at least 1024")
        if not math.isfinite(self.rotate_secs) or self.rotate_secs < 0:
            raise InvalidArgumentError("--payload-log-rotate-secs must be >= 0 (0: by size only)")
        if self.queue_requests < 1:
            raise InvalidArgumentError("--payload-log-queue-size must be >= 1")
        if self.queue_bytes < 1:
            raise InvalidArgumentError("--payload-log-queue-bytes must be >= 1")
        if self.max_bytes < 0:
            raise InvalidArgumentError("--payload-log-max-bytes must be >= 0 (0: no cap)")
        if 0 < self.max_bytes < self.rotate_bytes:
            raise InvalidArgumentError(
                f"--payload-log-max-bytes {self.max_bytes} is less than one file "
                f"(--payload-log-rotate-bytes {self.rotate_bytes}): give at least that, "
                "or 0 for no cap"
            )
        if not math.isfinite(self.max_age_secs) or self.max_age_secs < 0:
            raise InvalidArgumentError("--payload-log-max-age must be >= 0 (0: no age limit)")
        if not 0 < self.flush_secs <= 60:
            raise InvalidArgumentError("the payload log's flush interval must be in (0, 60] s")

    def rate_for(self, model: str) -> float:
        """The share of ``model``'s requests to log (0 for a model left out)."""
        if self.models and model not in self.models:
            return 0.0
        return self.model_rates.get(model, self.rate)


def _check_rate(rate: float, flag: str) -> None:
    if not (math.isfinite(rate) and 0.0 <= rate <= 1.0):
        raise InvalidArgumentError(f"{flag}{rate} is not a rate: give a number from 0 to 1")


def _number(text: str, flag: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidArgumentError(
            f"{flag} {text!r} is not a rate: give a number from 0 to 1, or MODEL=RATE"
        ) from None


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration_s(text: str, flag: str) -> float:
    """A duration in seconds: ``90``, ``90s``, ``30m``, ``12h`` or ``7d`` (0: none)."""
    raw = text.strip().lower()
    scale = _UNITS.get(raw[-1:], 0.0)
    number = raw[:-1] if scale else raw
    try:
        seconds = float(number) * (scale or 1.0)
    except ValueError:
        raise InvalidArgumentError(
            f"{flag} {text!r} is not a duration: give seconds, or a number with s, m, h or d "
            "(7d, 12h)"
        ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgumentError(f"{flag} {text!r} must be >= 0 (0: no limit)")
    return seconds


def parse_rates(values: Iterable[str]) -> tuple[float | None, dict[str, float]]:
    """``--payload-log-rate`` values: ``RATE`` (every model) or ``MODEL=RATE``. Returns the
    default rate (None if not given) and the per-model rates; a repeated key is refused."""
    default: float | None = None
    per_model: dict[str, float] = {}
    flag = "--payload-log-rate"
    for value in values:
        model, sep, text = value.rpartition("=")
        if not sep:
            if default is not None:
                raise InvalidArgumentError(f"{flag} gives the default rate twice")
            default = _number(value, flag)
            _check_rate(default, f"{flag} ")
            continue
        try:
            check_model_name(model)
        except InferdError as exc:
            raise InvalidArgumentError(f"{flag} {value!r}: {exc}") from None
        if model in per_model:
            raise InvalidArgumentError(f"{flag} gives the rate of model '{model}' twice")
        rate = _number(text, flag)
        _check_rate(rate, f"{flag} {model}=")
        per_model[model] = rate
    return default, per_model


def parse_names(values: Iterable[str], flag: str, *, models: bool) -> frozenset[str]:
    """Comma-separated names from a repeatable flag; model names are checked as the network's
    are, input names must be non-empty."""
    names: set[str] = set()
    for value in values:
        for raw in value.split(","):
            name = raw.strip()
            if not name:
                raise InvalidArgumentError(f"{flag} {value!r} has an empty name")
            if models:
                try:
                    check_model_name(name)
                except InferdError as exc:
                    raise InvalidArgumentError(f"{flag}: {exc}") from None
            names.add(name)
    return frozenset(names)
