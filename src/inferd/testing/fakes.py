"""Test doubles for the parts that cannot be controlled otherwise: time, and a scriptable model."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.backends.base import Result
from inferd.core.inference import InferRequest
from inferd.errors import InferdError


@dataclass(eq=False)
class _FakeTimer:
    when_ns: int
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Time stands still until :meth:`advance` moves it; due timers fire during ``advance``."""

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self._now = start_ns
        self._timers: list[_FakeTimer] = []

    def monotonic_ns(self) -> int:
        return self._now

    def call_later_ns(self, delay_ns: int, callback: Callable[[], None]) -> _FakeTimer:
        timer = _FakeTimer(self._now + max(0, delay_ns), callback)
        self._timers.append(timer)
        return timer

    def advance(self, ns: int) -> None:
        self._now += ns
        due = [t for t in self._timers if t.when_ns <= self._now and not t.cancelled]
        self._timers = [t for t in self._timers if t not in due and not t.cancelled]
        for timer in sorted(due, key=lambda t: t.when_ns):
            timer.callback()

    @property
    def pending_timers(self) -> list[int]:
        return sorted(t.when_ns for t in self._timers if not t.cancelled)


@dataclass
class FakeInstance:
    """A model instance whose behaviour a test scripts: it records every batch it runs.

    ``compute`` maps one request's inputs to its outputs (default: echo ``INPUT0`` as
    ``OUTPUT0``); raising an :class:`InferdError` fails only that request. With ``gate`` set,
    each execution blocks until the test releases it, so tests control when instances are busy.
    """

    compute: Callable[[dict[str, np.ndarray[Any, Any]]], dict[str, np.ndarray[Any, Any]]] = (
        lambda inputs: {"OUTPUT0": inputs["INPUT0"]}
    )
    gate: threading.Semaphore | None = None
    batches: list[list[InferRequest]] = field(default_factory=list)  # batches it computed
    received: list[list[InferRequest]] = field(default_factory=list)  # before the gate
    closed: bool = False

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        self.received.append(list(requests))
        if self.gate is not None:
            self.gate.acquire()
        self.batches.append(list(requests))
        results: list[Result] = []
        for request in requests:
            try:
                results.append(self.compute(request.inputs))
            except InferdError as exc:
                results.append(exc)
        return results

    def close(self) -> None:
        self.closed = True
