"""Injected monotonic time."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic_ns(self) -> int: ...


class SystemClock:
    __slots__ = ()

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()
