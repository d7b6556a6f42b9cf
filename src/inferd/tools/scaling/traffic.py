"""Traffic traces: requests per second over time, built from a small spec or read from a CSV.

A spec adds up components written ``NAME:key=value,...`` and joined by ``+``::

    daily:low=20,high=300            a day's sinusoid (period=24h, peak=14h: the busiest time)
    constant:rate=100                a flat rate
    step:from=100,to=250,at=2h       one rate until ``at``, another after
    ramp:from=0,to=400,start=1h,end=3h
    spike:height=500,at=13h,duration=10m,rise=1m   added on top, with linear edges
    csv:traffic.csv                  time (seconds from the start), requests per second

Times take a unit (``s``, ``m``, ``h``, ``d``; seconds without one). Pure: the spec is parsed
once into components, and :func:`rates` samples them once per second.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidArgumentError

__all__ = ["Traffic", "parse_duration", "parse_traffic", "rates"]

Array = np.ndarray[Any, Any]
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|ms|s|m|h|d)?\s*$")


def parse_duration(text: str, what: str = "a duration") -> float:
    """Seconds in ``text`` (``90``, ``90s``, ``15m``, ``2h``, ``1d``, ``500ms``, ``800us``)."""
    match = _DURATION.match(text)
    if match is None:
        raise InvalidArgumentError(
            f"{what}: {text!r} is not a duration (a number with us, ms, s, m, h or d, e.g. 15m)"
        )
    value, unit = float(match.group(1)), match.group(2) or "s"
    if unit in ("ms", "us"):
        return value / (1000 if unit == "ms" else 1e6)
    return value * _UNITS[unit]


@dataclass(frozen=True)
class Component:
    """One term of a trace: its name, a function of time, and how long it naturally lasts."""

    name: str
    rate_at: Callable[[Array], Array]
    natural_end_s: float


@dataclass(frozen=True)
class Traffic:
    spec: str
    components: tuple[Component, ...]

    @property
    def natural_duration_s(self) -> float:
        return max(c.natural_end_s for c in self.components)


def _number(params: Mapping[str, str], key: str, name: str, default: float | None = None) -> float:
    if key not in params:
        if default is None:
            raise InvalidArgumentError(f"traffic {name}: give {key}=...")
        return default
    try:
        value = float(params[key])
    except ValueError as exc:
        raise InvalidArgumentError(
            f"traffic {name}: {key}={params[key]!r} is not a number"
        ) from exc
    if value < 0 or not math.isfinite(value):
        raise InvalidArgumentError(f"traffic {name}: {key} cannot be negative")
    return value


def _time(params: Mapping[str, str], key: str, name: str, default: float | None = None) -> float:
    if key not in params:
        if default is None:
            raise InvalidArgumentError(f"traffic {name}: give {key}=... (a time, e.g. 2h)")
        return default
    return parse_duration(params[key], f"traffic {name} {key}")


def _daily(p: Mapping[str, str]) -> Component:
    low, high = _number(p, "low", "daily"), _number(p, "high", "daily")
    period = _time(p, "period", "daily", 86400.0)
    peak = _time(p, "peak", "daily", 14 * 3600.0)
    if high < low:
        raise InvalidArgumentError("traffic daily: high must be at least low")
    if period <= 0:
        raise InvalidArgumentError("traffic daily: the period must be longer than 0")

    def rate(t: Array) -> Array:
        out: Array = low + (high - low) * (1 + np.cos(2 * np.pi * (t - peak) / period)) / 2
        return out

    return Component("daily", rate, period)


def _constant(p: Mapping[str, str]) -> Component:
    value = _number(p, "rate", "constant")
    return Component("constant", lambda t: np.full_like(t, value), 3600.0)


def _step(p: Mapping[str, str]) -> Component:
    before, after = _number(p, "from", "step"), _number(p, "to", "step")
    at = _time(p, "at", "step")
    return Component("step", lambda t: np.where(t < at, before, after), at * 2 if at else 3600.0)


def _ramp(p: Mapping[str, str]) -> Component:
    start_rate, end_rate = _number(p, "from", "ramp"), _number(p, "to", "ramp")
    start, end = _time(p, "start", "ramp", 0.0), _time(p, "end", "ramp")
    if end <= start:
        raise InvalidArgumentError("traffic ramp: end must come after start")
    return Component(
        "ramp",
        lambda t: np.interp(t, [start, end], [start_rate, end_rate]),
        end + (end - start),
    )


def _spike(p: Mapping[str, str]) -> Component:
    height = _number(p, "height", "spike")
    at, duration = _time(p, "at", "spike"), _time(p, "duration", "spike")
    rise = _time(p, "rise", "spike", 0.0)
    if duration <= 0:
        raise InvalidArgumentError("traffic spike: the duration must be longer than 0")
    ramp = max(rise, 1e-9)
    xs = [at - ramp, at, at + duration, at + duration + ramp]
    return Component(
        "spike",
        lambda t: np.interp(t, xs, [0.0, height, height, 0.0], left=0.0, right=0.0),
        at + duration + rise + 600.0,
    )


def read_trace_csv(path: Path) -> tuple[Array, Array]:
    """``(times, rates)`` of a CSV of ``time,requests_per_second`` rows (a header is allowed)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgumentError(
            f"{path}: cannot read the traffic trace ({exc.strerror})"
        ) from exc
    times: list[float] = []
    values: list[float] = []
    for i, row in enumerate(csv.reader(text.splitlines())):
        if not row or not "".join(row).strip():
            continue
        try:
            t, r = float(row[0]), float(row[1])
        except (ValueError, IndexError) as exc:
            if i == 0:
                continue  # a header
            raise InvalidArgumentError(
                f"{path}: line {i + 1} is not 'time,requests_per_second'"
            ) from exc
        if r < 0 or not math.isfinite(r) or not math.isfinite(t):
            raise InvalidArgumentError(f"{path}: line {i + 1} has a negative or invalid rate")
        if times and t <= times[-1]:
            raise InvalidArgumentError(f"{path}: times must rise from line to line (line {i + 1})")
        times.append(t)
        values.append(r)
    if not times:
        raise InvalidArgumentError(f"{path}: no 'time,requests_per_second' rows")
    return np.array(times), np.array(values)


def _csv(path_text: str) -> Component:
    times, values = read_trace_csv(Path(path_text))
    start = float(times[0])
    return Component(
        "csv",
        lambda t: np.interp(t + start, times, values),
        float(times[-1] - start) + 1.0,
    )


_BUILDERS: dict[str, Callable[[Mapping[str, str]], Component]] = {
    "daily": _daily,
    "constant": _constant,
    "step": _step,
    "ramp": _ramp,
    "spike": _spike,
}


def _params(name: str, text: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidArgumentError(f"traffic {name}: {item!r} is not key=value")
        params[key.strip()] = value.strip()
    return params


def _known(name: str, params: Mapping[str, str], allowed: Sequence[str]) -> None:
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise InvalidArgumentError(
            f"traffic {name}: unknown parameter {unknown[0]!r} (it takes {', '.join(allowed)})"
        )


_ALLOWED = {
    "daily": ("low", "high", "period", "peak"),
    "constant": ("rate",),
    "step": ("from", "to", "at"),
    "ramp": ("from", "to", "start", "end"),
    "spike": ("height", "at", "duration", "rise"),
}


def parse_traffic(spec: str) -> Traffic:
    """The components of a traffic spec (see the module's docstring)."""
    components = []
    for part in filter(None, (s.strip() for s in spec.split("+"))):
        name, _, rest = part.partition(":")
        name = name.strip()
        if name == "csv":
            if not rest.strip():
                raise InvalidArgumentError("traffic csv: give the file, e.g. csv:trace.csv")
            components.append(_csv(rest.strip()))
            continue
        if name not in _BUILDERS:
            raise InvalidArgumentError(
                f"unknown traffic {name!r}: use daily, constant, step, ramp, spike or csv"
            )
        params = _params(name, rest)
        _known(name, params, _ALLOWED[name])
        components.append(_BUILDERS[name](params))
    if not components:
        raise InvalidArgumentError("the traffic spec is empty (e.g. daily:low=20,high=300)")
    return Traffic(spec, tuple(components))


def rates(traffic: Traffic, duration_s: int) -> Array:
    """Requests per second offered in each second ``[t, t+1)`` of ``duration_s`` seconds
    (sampled at the middle of the second)."""
    t = np.arange(duration_s, dtype=np.float64) + 0.5
    total = np.zeros(duration_s)
    for c in traffic.components:
        total += c.rate_at(t)
    out: Array = np.maximum(total, 0.0)
    return out
