"""The load itself: closed and open loops over a Transport, cut into measurement windows.

Closed loop: N contexts, each with its own channel, send back to back. Open loop: one task
sends at scheduled times whatever the answers (each request on an idle channel, a new one when
none is idle, so the number in flight is unbounded and reported), and counts how late each
send left. Sequence models: every request carries a sequence id and start / end flags; a
closed-loop context plays whole sequences one after another, an open loop keeps
``num_sequences`` sequences going in turn. Sequences under way when a load point ends are
finished (their end flag sent) before the next point starts.

Windows: every ``measurement_interval_ms`` the driver takes the latencies of the requests
answered since the last cut (a request belongs to the window its answer arrived in), the
errors, the client's CPU time and the model's statistics; it stops a load point once the last
three windows are stable or after ``max_trials`` windows (:mod:`stability`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from inferd.errors import PerfRunError as PerfRunError
from inferd.tools.perf.cost import CostProbe, CostSample
from inferd.tools.perf.llm_metrics import LlmFigures, LlmSample, llm_figures
from inferd.tools.perf.options import LoadMode, PerfOptions
from inferd.tools.perf.schedules import file_gaps, gaps
from inferd.tools.perf.server_metrics import MetricsSampler
from inferd.tools.perf.server_split import delta
from inferd.tools.perf.stability import is_stable, should_stop
from inferd.tools.perf.summary import LoadPoint, Window, merge
from inferd.tools.perf.transport import Channel, PerfRequestError, SequenceFlags, Transport

MAX_ERROR_SAMPLES = 5
OPEN_LOOP_MAX_PREOPEN = 64  # open loop: connections opened before the first send, at most
STOP_GRACE_S = 10.0  # at least this long for the requests in flight when a load point ends


class Progress(Protocol):
    """Told about each load point and window as they happen (the live display)."""

    def start_point(self, label: str, max_trials: int) -> None: ...

    def window(self, index: int, throughput: float, latency_us: float, in_flight: int) -> None: ...

    def end_point(self, point: LoadPoint) -> None: ...


@runtime_checkable
class LlmProgress(Protocol):
    """A progress sink that also shows the LLM figures of each window (``openai`` transport)."""

    def llm_window(self, index: int, figures: LlmFigures) -> None: ...


class NoProgress:
    def start_point(self, label: str, max_trials: int) -> None:
        pass

    def window(self, index: int, throughput: float, latency_us: float, in_flight: int) -> None:
        pass

    def end_point(self, point: LoadPoint) -> None:
        pass


@dataclass
class _Sequence:
    """One sequence under way: its id, the next position, and its length."""

    sequence_id: int
    position: int = 0


@dataclass
class _Tally:
    """What every request of one load point adds to; windows read it by difference."""

    latencies: array[int] = field(default_factory=lambda: array("q"))
    llm: list[LlmSample] = field(default_factory=list)  # openai transport: one per answer
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    sequences_ended: int = 0
    sent: int = 0
    late: int = 0
    max_slip_ns: int = 0
    in_flight: int = 0
    max_in_flight: int = 0

    def error(self, message: str) -> None:
        self.errors += 1
        if len(self.error_samples) < MAX_ERROR_SAMPLES and message not in self.error_samples:
            self.error_samples.append(message)


@dataclass
class _Cut:
    """The tally and readings at one window edge."""

    at_ns: int
    answered: int
    llm: int
    errors: int
    sequences_ended: int
    sent: int
    late: int
    cost: CostSample
    stats: dict[str, Any] | None


class Driver:
    """Runs the load points of one :class:`PerfOptions` over a prepared transport."""

    def __init__(
        self,
        transport: Transport,
        options: PerfOptions,
        *,
        request_count: int,
        sequence: bool,
        probe: CostProbe,
        progress: Progress | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        stop_grace_s: float = STOP_GRACE_S,
        llm: bool = False,
        sampler: MetricsSampler | None = None,
    ) -> None:
        if request_count < 1:
            raise ValueError("the driver needs at least one prepared request")
        self._transport = transport
        self._options = options
        self._n = request_count
        self._sequence = sequence
        self._probe = probe
        self._progress = progress or NoProgress()
        self._clock = clock
        self._stop_grace_s = stop_grace_s
        # the transport gives LLM samples: every point carries LLM figures, and a point whose
        # every request failed is reported (an error row) instead of raised
        self._llm = llm
        self._idle: list[Channel] = []
        self._all: list[Channel] = []
        self._sequence_ids: Iterator[int] = itertools.count(1)
        self._tally = _Tally()
        self._stopping = False
        self._sampler = sampler  # --collect-metrics: reads the server's gauges meanwhile

    # -- public ---------------------------------------------------------------------------------

    async def run(self) -> list[LoadPoint]:
        """Every load point of the options, in order. Raises PerfRunError when a point got no
        answer at all."""
        points = []
        try:
            for level in self._options.load_levels():
                point = await self.measure(level)
                points.append(point)
                if point.request_count == 0 or self._above_threshold(point):
                    break
        finally:
            await self.close()
        return points

    def _above_threshold(self, point: LoadPoint) -> bool:
        """perf_analyzer's -l: no higher load once the stabilising latency passed it."""
        limit = self._options.latency_threshold_ms
        if limit is None:
            return False
        pct = self._options.percentile
        latency_us = point.avg_latency_us if pct is None else point.percentiles_us[pct]
        return latency_us > limit * 1000

    async def measure(self, level: float) -> LoadPoint:
        """Load at ``level`` (a concurrency or a rate), windows until stable, the merged point."""
        opts = self._options
        self._tally = _Tally()
        self._stopping = False
        mode = opts.mode
        label = (
            f"concurrency {int(level)}"
            if mode is LoadMode.CONCURRENCY
            else (f"request rate {level:g}/s" if mode is LoadMode.REQUEST_RATE else "intervals")
        )
        self._progress.start_point(label, opts.max_trials)
        if self._sampler is not None:
            self._sampler.clear()
            self._sampler.start()
        load = await self._start_load(level)
        windows: list[Window] = []
        try:
            cut = await self._cut()
            while True:
                await asyncio.sleep(opts.measurement_interval_ms / 1000)
                if load.done():  # the load task failed: report its error
                    load.result()
                nxt = await self._cut()
                window = self._window(cut, nxt)
                cut = nxt
                windows.append(window)
                figures = [w.figures(opts.batch_size, opts.percentile) for w in windows]
                self._progress.window(
                    len(windows),
                    figures[-1].throughput,
                    figures[-1].latency_ns / 1000,
                    self._tally.in_flight,
                )
                if window.llm and isinstance(self._progress, LlmProgress):
                    self._progress.llm_window(
                        len(windows), llm_figures(window.llm, window.duration_ns)
                    )
                if should_stop(figures, opts.stability_ratio, opts.max_trials):
                    break
        finally:
            self._stopping = True
            if self._sampler is not None:
                await asyncio.to_thread(self._sampler.stop)
            await self._stop(load)
        figures = [w.figures(opts.batch_size, opts.percentile) for w in windows]
        stable = is_stable(figures, opts.stability_ratio)
        point = merge(
            windows,
            mode=mode.value,
            level=level,
            batch_size=opts.batch_size,
            stable=stable,
            percentile=opts.percentile,
        )
        if self._llm and point.llm is None:
            point = dataclasses.replace(point, llm=llm_figures([], int(point.duration_s * 1e9)))
        self._progress.end_point(point)
        if point.request_count == 0:
            if point.error_count and self._llm:
                return point
            if point.error_count:
                raise PerfRunError(
                    f"every request failed at {label}: {'; '.join(point.errors) or 'no message'}"
                )
            raise PerfRunError(
                f"no request was answered within a measurement window at {label}: use a larger "
                "--measurement-interval"
            )
        return point

    async def _stop(self, load: asyncio.Task[None]) -> None:
        """Let the requests in flight finish; cancel the ones a hung server never answers."""
        grace_s = max(self._stop_grace_s, 2 * self._options.measurement_interval_ms / 1000)
        done, _ = await asyncio.wait({load}, timeout=grace_s)
        if not done:
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)
            raise PerfRunError(
                f"requests were still unanswered {grace_s:g} s after the load point ended: "
                "the server stopped answering"
            )
        load.result()

    async def close(self) -> None:
        channels, self._all, self._idle = self._all, [], []
        for channel in channels:
            await channel.close()

    # -- windows --------------------------------------------------------------------------------

    async def _cut(self) -> _Cut:
        t = self._tally
        at = self._clock()
        answered, errors, ended = len(t.latencies), t.errors, t.sequences_ended
        sent, late, llm = t.sent, t.late, len(t.llm)
        cost = await self._probe.sample()
        stats = await self._transport.statistics()
        return _Cut(at, answered, llm, errors, ended, sent, late, cost, stats)

    def _window(self, a: _Cut, b: _Cut) -> Window:
        t = self._tally
        latencies = np.frombuffer(t.latencies, dtype=np.int64)[a.answered : b.answered].copy()
        server = delta(a.stats, b.stats) if a.stats is not None and b.stats is not None else None
        cpu_a, cpu_b = a.cost.server_cpu_s, b.cost.server_cpu_s
        window = Window(
            duration_ns=b.at_ns - a.at_ns,
            latencies_ns=latencies,
            llm=tuple(t.llm[a.llm : b.llm]),
            errors=b.errors - a.errors,
            error_samples=tuple(t.error_samples),
            sequences_ended=b.sequences_ended - a.sequences_ended,
            sent=b.sent - a.sent,
            late=b.late - a.late,
            max_slip_ns=t.max_slip_ns,
            max_in_flight=t.max_in_flight,
            client_cpu_s=b.cost.client_cpu_s - a.cost.client_cpu_s,
            server=server,
            server_cpu_s=cpu_b - cpu_a if cpu_a is not None and cpu_b is not None else None,
            server_rss_bytes=b.cost.server_rss_bytes,
            energy_j=self._probe.energy_j(a.cost, b.cost),
            metrics=self._sampler.between(a.at_ns, b.at_ns) if self._sampler else (),
        )
        t.max_slip_ns = 0
        t.max_in_flight = t.in_flight
        return window

    # -- channels -------------------------------------------------------------------------------

    async def _channel(self) -> Channel:
        if self._idle:
            return self._idle.pop()
        return await self._new_channel()

    async def _new_channel(self) -> Channel:
        channel = await self._transport.open_channel()
        self._all.append(channel)
        return channel

    def _release(self, channel: Channel) -> None:
        self._idle.append(channel)

    def _flags(self, seq: _Sequence) -> SequenceFlags:
        length = self._options.sequence_length
        return SequenceFlags(seq.sequence_id, seq.position == 0, seq.position == length - 1)

    def _advance(self, seq: _Sequence) -> None:
        seq.position += 1
        if seq.position >= self._options.sequence_length:
            self._tally.sequences_ended += 1
            seq.sequence_id, seq.position = next(self._sequence_ids), 0

    # -- load -----------------------------------------------------------------------------------

    async def _start_load(self, level: float) -> asyncio.Task[None]:
        opts = self._options
        if opts.mode is LoadMode.CONCURRENCY:
            channels = [await self._channel() for _ in range(int(level))]
            return asyncio.create_task(self._closed(channels), name="inferd-perf-closed-loop")
        if opts.mode is LoadMode.REQUEST_RATE:
            schedule = gaps(opts.distribution, level, np.random.default_rng(opts.seed))
        else:
            schedule = file_gaps(opts.intervals_us)
        rate = level if opts.mode is LoadMode.REQUEST_RATE else 1e6 / min(opts.intervals_us)
        return asyncio.create_task(self._open(schedule, rate), name="inferd-perf-open-loop")

    async def _closed(self, channels: list[Channel]) -> None:
        contexts = [
            self._closed_sequences(c, i) if self._sequence else self._closed_context(c, i)
            for i, c in enumerate(channels)
        ]
        try:
            await asyncio.gather(*contexts)
        finally:
            for channel in channels:
                self._release(channel)

    async def _closed_context(self, channel: Channel, first: int) -> None:
        tally, clock, n = self._tally, self._clock, self._n
        append = tally.latencies.append
        index = first % n
        tally.in_flight += 1
        tally.max_in_flight = max(tally.max_in_flight, tally.in_flight)
        try:
            while not self._stopping:
                start = clock()
                try:
                    sample = await channel.infer(index)
                except PerfRequestError as exc:
                    tally.error(str(exc))
                else:
                    append(clock() - start)
                    if sample is not None:
                        tally.llm.append(sample)
                index = index + 1 if index + 1 < n else 0
        finally:
            tally.in_flight -= 1

    async def _closed_sequences(self, channel: Channel, first: int) -> None:
        tally, clock, n = self._tally, self._clock, self._n
        seq = _Sequence(next(self._sequence_ids))
        index = first % n
        tally.in_flight += 1
        tally.max_in_flight = max(tally.max_in_flight, tally.in_flight)
        try:
            # once stopping, a sequence under way is finished so the server can free its slot
            while not self._stopping or seq.position != 0:
                start = clock()
                try:
                    await channel.infer(index, self._flags(seq))
                except PerfRequestError as exc:
                    tally.error(str(exc))
                else:
                    tally.latencies.append(clock() - start)
                self._advance(seq)
                index = (index + 1) % n
        finally:
            tally.in_flight -= 1

    async def _open(self, schedule: Iterator[float], rate: float) -> None:
        clock, n = self._clock, self._n
        sequences = (
            [_Sequence(next(self._sequence_ids)) for _ in range(self._options.num_sequences)]
            if self._sequence
            else []
        )
        # connections for the requests expected in flight, opened before the first send; a
        # burst beyond them opens more from the request's own task, never from the sender
        while len(self._idle) < min(OPEN_LOOP_MAX_PREOPEN, 2 + int(rate * 0.005)):
            self._idle.append(await self._new_channel())
        tasks: set[asyncio.Task[None]] = set()
        due = clock()
        index = 0
        turn = 0
        try:
            while not self._stopping:
                due += int(next(schedule) * 1e9)
                wait = due - clock()
                if wait > 0:
                    await asyncio.sleep(wait / 1e9)
                    if self._stopping:
                        break
                flags = None
                if sequences:
                    seq = sequences[turn]
                    turn = (turn + 1) % len(sequences)
                    flags = self._flags(seq)
                    self._advance(seq)
                task = asyncio.create_task(self._one(index, flags, due))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                index = index + 1 if index + 1 < n else 0
            await asyncio.gather(*tasks)
            # end the sequences under way so the server frees their slots
            for seq in sequences:
                if seq.position != 0:
                    end = SequenceFlags(seq.sequence_id, False, True)
                    await self._one(index, end, None)
        finally:
            for task in tasks:
                task.cancel()

    async def _one(self, index: int, flags: SequenceFlags | None, due: int | None) -> None:
        """One open-loop request: a channel, the send (late if past ``due`` + the bound), the
        answer. ``due`` None: a closing request, not counted."""
        tally, clock = self._tally, self._clock
        tally.in_flight += 1
        tally.max_in_flight = max(tally.max_in_flight, tally.in_flight)
        try:
            channel = await self._channel()
        except BaseException:
            tally.in_flight -= 1
            raise
        start = clock()
        if due is not None:
            slip = start - due
            tally.sent += 1
            if slip > self._options.slip_bound_us * 1000:
                tally.late += 1
            tally.max_slip_ns = max(tally.max_slip_ns, slip)
        try:
            sample = await channel.infer(index, flags)
        except PerfRequestError as exc:
            if due is not None:
                tally.error(str(exc))
        else:
            if due is not None:
                tally.latencies.append(clock() - start)
                if sample is not None:
                    tally.llm.append(sample)
        finally:
            tally.in_flight -= 1
            self._release(channel)
