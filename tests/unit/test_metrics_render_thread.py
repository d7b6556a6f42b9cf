"""A /metrics scrape reads the components' state on the event loop and renders off it."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inferd.metrics.endpoint import MetricsApp
from inferd.metrics.snapshots import LoopReads


class _Blocking(Collector):
    """Reads its state, then waits for the loop to run something while the render is on."""

    def __init__(self, read: Any, loop_ran: threading.Event) -> None:
        self._read = read
        self._loop_ran = loop_ran
        self.seen: dict[str, Any] = {}

    def collect(self) -> Iterator[Metric]:
        self.seen["render_thread"] = threading.get_ident()
        self.seen["value"] = self._read()
        self.seen["loop_ran"] = self._loop_ran.wait(timeout=5)
        yield GaugeMetricFamily("inferd_test_value", "a value read at the scrape", value=1.0)


async def _get(app: MetricsApp) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "path": "/metrics", "method": "GET"}
    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def test_the_state_is_read_on_the_loop_and_the_render_leaves_the_loop_free() -> None:
    loop_thread = threading.get_ident()
    state = {"value": 7}
    read_threads: list[int] = []

    def read() -> int:
        read_threads.append(threading.get_ident())
        return state["value"]

    reads = LoopReads()
    loop_ran = threading.Event()
    collector = _Blocking(reads(read), loop_ran)
    registry = CollectorRegistry()
    registry.register(collector)
    app = MetricsApp(registry, reads)

    async def meanwhile() -> None:
        await asyncio.sleep(0.01)
        state["value"] = 8  # changed on the loop while the render runs: not seen by it
        loop_ran.set()

    (status, body), _ = await asyncio.gather(_get(app), meanwhile())
    assert status == 200
    assert b"inferd_test_value 1.0" in body
    assert collector.seen["loop_ran"], "the event loop was held up by the render"
    assert collector.seen["render_thread"] != loop_thread
    assert read_threads == [loop_thread]  # read once, on the loop, before the render
    assert collector.seen["value"] == 7
    # outside a scrape the read calls through again
    assert reads._reads[0]() == 8


async def test_scrapes_render_one_at_a_time_each_with_its_own_reads() -> None:
    values = iter(range(100))
    renders: list[int] = []
    running = 0
    most = 0

    class Counting(Collector):
        def __init__(self, read: Any) -> None:
            self._read = read

        def collect(self) -> Iterator[Metric]:
            nonlocal running, most
            running += 1
            most = max(most, running)
            renders.append(self._read())
            threading.Event().wait(0.02)
            running -= 1
            yield GaugeMetricFamily("inferd_test_render", "renders", value=float(renders[-1]))

    reads = LoopReads()
    registry = CollectorRegistry()
    registry.register(Counting(reads(lambda: next(values))))
    app = MetricsApp(registry, reads)
    results = await asyncio.gather(*(_get(app) for _ in range(4)))
    assert most == 1
    assert sorted(renders) == [0, 1, 2, 3]
    shown = [re.search(rb"^inferd_test_render (\S+)$", body, re.M) for _, body in results]
    assert sorted(m[1] for m in shown if m) == [b"0.0", b"1.0", b"2.0", b"3.0"]


async def test_a_failing_read_fails_the_scrape_and_drops_what_was_taken() -> None:
    reads = LoopReads()
    first = reads(lambda: "taken")
    calls = {"n": 0}

    def broken() -> str:
        calls["n"] += 1
        raise RuntimeError("statistics unavailable")

    reads(broken)
    with pytest.raises(RuntimeError, match="statistics unavailable"):
        reads.take()
    assert first._held is False

    registry = CollectorRegistry()
    app = MetricsApp(registry, reads)
    with pytest.raises(RuntimeError, match="statistics unavailable"):
        await _get(app)
    assert first._held is False
    assert calls["n"] == 2
