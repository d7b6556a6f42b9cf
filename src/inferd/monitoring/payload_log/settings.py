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
    "DEFAULT_QUEUE_BYTES",
    "DEFAULT_QUEUE_REQUESTS",
    "DEFAULT_ROTATE_BYTES",
    "DEFAULT_ROTATE_SECS",
    "FORMATS",
    "PayloadLogSettings",
    "parse_names",
    "parse_rates",
]

FORMATS = ("jsonl", "parquet")
MIB = 1024 * 1024
DEFAULT_ROTATE_BYTES = 64 * MIB
DEFAULT_ROTATE_SECS = 3600.0
DEFAULT_QUEUE_REQUESTS = 10_000
DEFAULT_QUEUE_BYTES = 256 * MIB


@dataclass(frozen=True, slots=True)
class PayloadLogSettings:
    """Where and what the payload log writes.

    ``rate`` is the share of a model's answered requests that are logged (0..1), unless
    ``model_rates`` names the model; ``models`` (empty: every model) limits logging to those
    models; inputs named in ``redact`` are never written, only marked as redacted. A file is
    closed and a new one started once it holds ``rotate_bytes`` or is ``rotate_secs`` old (0:
    only by size). At most ``queue_requests`` sampled requests holding about ``queue_bytes`` of
    tensors wait for the writer; beyond that a sampled request is dropped and counted.
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
