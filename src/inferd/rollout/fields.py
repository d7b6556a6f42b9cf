"""Checked scalar fields of a traffic policy: each wrong value is one
:class:`InvalidArgumentError` naming the field (``rollout policy: sample: must be a number <= 1,
not 1.5``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from inferd.errors import InvalidArgumentError

__all__ = ["fail", "flag", "number", "optional_int", "optional_number", "whole"]


def fail(where: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"rollout policy: {where}: {message}")


def number(
    raw: Mapping[str, Any],
    key: str,
    default: float,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    where: str | None = None,
) -> float:
    value = raw.get(key, default)
    where = where or key
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fail(where, f"must be a number, not {value!r}")
    if low is not None and (value < low or (low_open and value == low)):
        raise fail(where, f"must be a number {'>' if low_open else '>='} {low:g}, not {value:g}")
    if high is not None and value > high:
        raise fail(where, f"must be a number <= {high:g}, not {value:g}")
    return float(value)


def optional_number(
    raw: Mapping[str, Any], key: str, *, high: float | None = None, low_open: bool = False
) -> float | None:
    if raw.get(key) is None:
        return None
    return number(raw, key, 0.0, low=0.0, high=high, low_open=low_open)


def whole(
    raw: Mapping[str, Any], key: str, default: int, *, minimum: int, where: str | None = None
) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise fail(where or key, f"must be a whole number >= {minimum}, not {value!r}")
    return value


def optional_int(raw: Mapping[str, Any], key: str, *, minimum: int) -> int | None:
    return None if raw.get(key) is None else whole(raw, key, 0, minimum=minimum)


def flag(raw: Mapping[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise fail(key, f"must be true or false, not {value!r}")
    return value
