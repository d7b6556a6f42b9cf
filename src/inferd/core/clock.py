"""Injected monotonic time and timers.

Schedulers read time and arm timers only through a :class:`Clock`, so tests can replace it with
:class:`inferd.testing.FakeClock` and step time by hand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def monotonic_ns(self) -> int: ...

    def call_later_ns(self, delay_ns: int, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` on the running event loop after ``delay_ns``."""
        ...


class SystemClock:
    __slots__ = ()

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def call_later_ns(self, delay_ns: int, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(0, delay_ns) / 1e9, callback)
