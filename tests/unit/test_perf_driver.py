"""The load driver over a recording transport: closed loops keep N requests in flight, open
loops send whatever the answers, sequences carry unique ids and start/end flags and end before
the next load point, errors are counted and a run where everything fails stops."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pytest

from inferd.tools.perf.cost import CostProbe
from inferd.tools.perf.driver import Driver, PerfRunError
from inferd.tools.perf.options import LoadMode, PerfOptions, Range
from inferd.tools.perf.transport import ModelInfo, PerfRequestError, RequestData, SequenceFlags


class RecordingChannel:
    def __init__(self, transport: RecordingTransport) -> None:
        self.t = transport

    async def infer(self, index: int, sequence: SequenceFlags | None = None) -> None:
        t = self.t
        t.calls += 1
        t.indexes.append(index)
        if sequence is not None:
            t.sequences[sequence.sequence_id].append((sequence.start, sequence.end))
        t.in_flight += 1
        t.most_in_flight = max(t.most_in_flight, t.in_flight)
        try:
            await asyncio.sleep(t.delay_s)
        finally:
            t.in_flight -= 1
        if t.fail_every and t.calls % t.fail_every == 0:
            raise PerfRequestError(f"failure number {t.calls // t.fail_every}")

    async def close(self) -> None:
        self.t.closed += 1


class RecordingTransport:
    name = "recording"

    def __init__(self, delay_s: float = 0.001, fail_every: int = 0) -> None:
        self.delay_s = delay_s
        self.fail_every = fail_every
        self.calls = 0
        self.indexes: list[int] = []
        self.sequences: dict[int, list[tuple[bool, bool]]] = defaultdict(list)
        self.in_flight = 0
        self.most_in_flight = 0
        self.opened = 0
        self.closed = 0

    async def model_info(self) -> ModelInfo:
        return ModelInfo("m", "", (), (), 0, False, False)

    async def prepare(
        self, requests: Sequence[RequestData], batch_size: int, outputs: Sequence[str] | None
    ) -> None:
        pass

    async def open_channel(self) -> RecordingChannel:
        self.opened += 1
        return RecordingChannel(self)

    async def statistics(self) -> dict[str, Any] | None:
        return None

    async def close(self) -> None:
        pass


async def _run(
    transport: RecordingTransport,
    *,
    sequence: bool = False,
    requests: int = 3,
    grace_s: float = 10.0,
    **kw: Any,
) -> list[Any]:
    options = PerfOptions("m", measurement_interval_ms=60, max_trials=3, **kw)
    probe = CostProbe(server_pid=None, metrics_url=None, in_process=False)
    await probe.start()
    driver = Driver(
        transport,
        options,
        request_count=requests,
        sequence=sequence,
        probe=probe,
        stop_grace_s=grace_s,
    )
    return await driver.run()


async def test_a_closed_loop_keeps_its_concurrency_in_flight() -> None:
    t = RecordingTransport()
    points = await _run(t, concurrency=Range(1, 3, 2))
    assert [p.level for p in points] == [1, 3]
    assert t.most_in_flight == 3
    assert t.opened == 3  # the channel of the first point is used again by the second
    assert t.closed == 3
    assert all(p.request_count > 0 and p.error_count == 0 for p in points)
    assert all(p.windows == 3 for p in points)
    assert set(t.indexes) == {0, 1, 2}  # every prepared request is sent in turn


async def test_closed_loop_sequences_have_unique_ids_and_flags_and_all_end() -> None:
    t = RecordingTransport()
    points = await _run(t, sequence=True, concurrency=Range(2, 2, 1), sequence_length=4)
    assert t.sequences
    for flags in t.sequences.values():
        assert flags == [(True, False), (False, False), (False, False), (False, True)]
    assert points[0].sequence_count > 0


async def test_an_open_loop_does_not_wait_for_answers() -> None:
    t = RecordingTransport(delay_s=0.05)
    (point,) = await _run(t, mode=LoadMode.REQUEST_RATE, request_rate=Range(400, 400, 1))
    # each answer takes 50 ms; at 400/s about 20 requests are under way at once
    assert t.most_in_flight >= 5
    assert point.max_in_flight >= 5
    assert point.sent > 0
    assert point.request_count > 0


async def test_open_loop_sequences_are_ended_when_the_point_ends() -> None:
    t = RecordingTransport()
    await _run(
        t,
        sequence=True,
        mode=LoadMode.REQUEST_RATE,
        request_rate=Range(300, 300, 1),
        sequence_length=5,
        num_sequences=3,
    )
    for flags in t.sequences.values():
        assert flags[0] == (True, False)
        assert flags[-1][1]  # every sequence got its end flag
        assert sum(end for _, end in flags) == 1


async def test_errors_are_counted_with_the_servers_message() -> None:
    t = RecordingTransport(fail_every=2)
    (point,) = await _run(t)
    assert point.error_count > 0
    assert point.request_count > 0
    assert point.errors[0].startswith("failure number")


async def test_a_run_where_every_request_fails_stops() -> None:
    with pytest.raises(PerfRunError, match="every request failed at concurrency 1"):
        await _run(RecordingTransport(fail_every=1))


async def test_the_latency_threshold_stops_the_search() -> None:
    t = RecordingTransport(delay_s=0.005)
    points = await _run(t, concurrency=Range(1, 4, 1), latency_threshold_ms=1.0)
    assert [p.level for p in points] == [1]  # 5 ms is above 1 ms: no higher concurrency


async def test_a_server_that_stops_answering_ends_the_run() -> None:
    t = RecordingTransport(delay_s=3600)
    with pytest.raises(PerfRunError, match="the server stopped answering"):
        await _run(t, grace_s=0.1)
    assert t.in_flight == 0  # the hung requests were cancelled
