"""MLPerf Inference scenarios driven by MLCommons LoadGen (``mlperf_loadgen``) over a Transport.

LoadGen decides when queries are issued and judges the run; inferd supplies the system under
test (each query sample is one prepared request, sent through a channel, completed with
``QuerySamplesComplete``) and the query sample library (the prepared requests). LoadGen runs on
its own threads: its ``issue_queries`` hands samples to the event loop, which sends them.

- single-stream: one query of one sample at a time; result: the 90th percentile latency;
- multi-stream: queries of ``samples_per_query`` samples; result: the 99th percentile;
- server: Poisson arrivals at a target QPS; result: the highest target QPS whose run is VALID
  (its p99 within the latency bound), found by running LoadGen's server scenario at several
  targets (doubling until a run fails, then halving the gap);
- offline: every sample at once; result: samples per second.

Each run's ``mlperf_log_summary.txt`` is read back (:func:`parse_summary`) for the figures and
the VALID / INVALID verdict.
"""

from __future__ import annotations

import asyncio
import enum
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferd.errors import InvalidArgumentError
from inferd.tools.perf.transport import Channel, PerfRequestError, Transport

SERVER_MAX_IN_FLIGHT = 256  # server scenario: channels open at most (arrivals beyond wait)
OFFLINE_MAX_IN_FLIGHT = 16  # offline: requests in flight at once
CALIBRATION_S = 0.5


class Scenario(enum.Enum):
    SINGLE_STREAM = "single-stream"
    MULTI_STREAM = "multi-stream"
    SERVER = "server"
    OFFLINE = "offline"


@dataclass(frozen=True)
class MlperfOptions:
    scenario: Scenario
    latency_bound_ms: float | None = None  # server: the p99 bound (required there)
    samples_per_query: int = 8  # multi-stream
    target_qps: float | None = None  # server: first target; offline: expected QPS
    min_duration_ms: int = 10_000
    min_query_count: int = 100
    log_dir: Path | None = None  # None: a temporary folder per run
    server_runs: int = 6  # server: LoadGen runs of the search at most


@dataclass(frozen=True)
class Run:
    """One LoadGen run and what its summary said."""

    target_qps: float | None
    valid: bool
    summary: dict[str, str]
    errors: int
    log_dir: str


@dataclass(frozen=True)
class MlperfResult:
    scenario: Scenario
    metric: str  # what ``value`` is, in MLPerf's words
    value: float | None
    unit: str
    valid: bool
    runs: list[Run] = field(default_factory=list)

    def text(self) -> str:
        verdict = "VALID" if self.valid else "INVALID"
        if self.value is None:
            return f"MLPerf {self.scenario.value}: {self.metric}: none — {verdict}"
        return (
            f"MLPerf {self.scenario.value}: {self.metric}: {self.value:g} {self.unit} — {verdict}"
        )


# -- the summary file (pure) ------------------------------------------------------------------


def parse_summary(text: str) -> dict[str, str]:
    """``key : value`` lines of ``mlperf_log_summary.txt`` (keys stripped, first one wins)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key and not key.startswith(("*", "=")) and key not in out:
            out[key] = value.strip()
    return out


def is_valid(summary: dict[str, str]) -> bool:
    return summary.get("Result is", "").upper() == "VALID"


def result_of(scenario: Scenario, runs: list[Run]) -> MlperfResult:
    """The scenario's figure in MLPerf's terms from its run(s)."""
    if scenario is Scenario.SERVER:
        good = [r for r in runs if r.valid and r.target_qps is not None]
        best = max(good, key=lambda r: r.target_qps or 0.0) if good else None
        return MlperfResult(
            scenario,
            "highest target QPS with p99 within the latency bound",
            best.target_qps if best else None,
            "queries/s",
            best is not None,
            runs,
        )
    (run,) = runs
    s = run.summary
    if scenario is Scenario.OFFLINE:
        value, metric, unit = s.get("Samples per second"), "samples per second", "samples/s"
    elif scenario is Scenario.SINGLE_STREAM:
        value, metric, unit = (
            _ns(s, "90.0th percentile latency (ns)"),
            "90th percentile latency",
            "usec",
        )
    else:
        value, metric, unit = (
            _ns(s, "99.0th percentile latency (ns)"),
            "99th percentile latency",
            "usec",
        )
    return MlperfResult(
        scenario, metric, float(value) if value is not None else None, unit, run.valid, runs
    )


def _ns(summary: dict[str, str], key: str) -> str | None:
    value = summary.get(key)
    return None if value is None else str(float(value) / 1000)


def next_target(history: list[tuple[float, bool]]) -> float | None:
    """The server search's next target QPS: double while runs pass, then halve the gap between
    the best passing and the lowest failing target; None once the first run fails low."""
    passed = [q for q, ok in history if ok]
    failed = [q for q, ok in history if not ok]
    if not failed:
        return history[-1][0] * 2
    low = max(passed, default=0.0)
    high = min(q for q in failed if q > low) if any(q > low for q in failed) else None
    if high is None:
        return low * 2
    if low == 0.0:
        return high / 2 if high / 2 >= 1 else None
    return (low + high) / 2


# -- the system under test --------------------------------------------------------------------


class _Bridge:
    """LoadGen's SUT: samples from LoadGen's threads to channels on the event loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        transport: Transport,
        request_count: int,
        max_in_flight: int,
        complete: Callable[[list[int]], None],
    ) -> None:
        self._loop = loop
        self._transport = transport
        self._n = request_count
        self._complete = complete
        self._slots = asyncio.Semaphore(max_in_flight)
        self._idle: list[Channel] = []
        self._all: list[Channel] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.errors = 0

    def issue_queries(self, samples: list[Any]) -> None:  # on a LoadGen thread
        batch = [(s.id, s.index) for s in samples]
        self._loop.call_soon_threadsafe(self._issue, batch)

    def flush_queries(self) -> None:
        pass

    def _issue(self, batch: list[tuple[int, int]]) -> None:
        for sample_id, index in batch:
            task = self._loop.create_task(self._send(sample_id, index % self._n))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, sample_id: int, index: int) -> None:
        async with self._slots:
            channel = self._idle.pop() if self._idle else await self._open()
            try:
                await channel.infer(index)
            except PerfRequestError:
                self.errors += 1
            finally:
                self._idle.append(channel)
                self._complete([sample_id])

    async def _open(self) -> Channel:
        channel = await self._transport.open_channel()
        self._all.append(channel)
        return channel

    async def close(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for channel in self._all:
            await channel.close()


def _lg() -> Any:
    try:
        import mlperf_loadgen
    except ImportError as exc:  # pragma: no cover - the perf extra installs it
        raise InvalidArgumentError(
            "--scenario needs MLCommons LoadGen: pip install 'inferd[perf]'"
        ) from exc
    return mlperf_loadgen


def _settings(
    lg: Any, opts: MlperfOptions, calibrated: tuple[float, float], qps: float | None
) -> Any:
    latency_s, throughput = calibrated
    s = lg.TestSettings()
    s.mode = lg.TestMode.PerformanceOnly
    s.min_duration_ms = opts.min_duration_ms
    s.min_query_count = opts.min_query_count
    # expectations below the truth only make LoadGen prepare more queries than it needs
    if opts.scenario is Scenario.SINGLE_STREAM:
        s.scenario = lg.TestScenario.SingleStream
        s.single_stream_expected_latency_ns = max(1000, int(latency_s * 1e9 / 2))
    elif opts.scenario is Scenario.MULTI_STREAM:
        s.scenario = lg.TestScenario.MultiStream
        s.multi_stream_samples_per_query = opts.samples_per_query
        s.multi_stream_expected_latency_ns = max(1000, int(latency_s * 1e9 / 2))
    elif opts.scenario is Scenario.SERVER:
        s.scenario = lg.TestScenario.Server
        s.server_target_qps = qps
        assert opts.latency_bound_ms is not None
        s.server_target_latency_ns = int(opts.latency_bound_ms * 1e6)
    else:
        s.scenario = lg.TestScenario.Offline
        s.offline_expected_qps = opts.target_qps or throughput * 2
    return s


async def calibrate(transport: Transport, request_count: int, channels: int) -> tuple[float, float]:
    """A short closed loop: the latency of one request alone (s) and the throughput of
    ``channels`` at once (requests/s), for LoadGen's expectations."""
    opened = [await transport.open_channel() for _ in range(channels)]
    try:
        start = time.perf_counter()
        for i in range(20):
            await opened[0].infer(i % request_count)
        latency = (time.perf_counter() - start) / 20
        done = 0
        end = time.perf_counter() + CALIBRATION_S

        async def loop(channel: Channel) -> None:
            nonlocal done
            i = 0
            while time.perf_counter() < end:
                await channel.infer(i % request_count)
                i += 1
                done += 1

        began = time.perf_counter()
        await asyncio.gather(*(loop(c) for c in opened))
        return latency, done / (time.perf_counter() - began)
    finally:
        for channel in opened:
            await channel.close()


async def _one_run(
    lg: Any,
    transport: Transport,
    opts: MlperfOptions,
    request_count: int,
    settings: Any,
    qps: float | None,
) -> Run:
    loop = asyncio.get_running_loop()
    max_in_flight = {
        Scenario.SINGLE_STREAM: 1,
        Scenario.MULTI_STREAM: opts.samples_per_query,
        Scenario.SERVER: SERVER_MAX_IN_FLIGHT,
        Scenario.OFFLINE: OFFLINE_MAX_IN_FLIGHT,
    }[opts.scenario]

    def complete(ids: list[int]) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(i, 0, 0) for i in ids])

    bridge = _Bridge(loop, transport, request_count, max_in_flight, complete)
    sut = lg.ConstructSUT(bridge.issue_queries, bridge.flush_queries)
    qsl = lg.ConstructQSL(request_count, request_count, lambda _: None, lambda _: None)
    temp = tempfile.TemporaryDirectory(prefix="inferd-mlperf-") if opts.log_dir is None else None
    outdir = Path(temp.name) if temp is not None else opts.log_dir
    assert outdir is not None
    if qps is not None and opts.log_dir is not None:
        outdir = outdir / f"qps_{qps:g}"
    outdir.mkdir(parents=True, exist_ok=True)
    log = lg.LogSettings()
    log.log_output.outdir = str(outdir)
    log.log_output.copy_summary_to_stdout = False
    try:
        await asyncio.to_thread(lg.StartTestWithLogSettings, sut, qsl, settings, log)
        await bridge.close()
        summary = parse_summary((outdir / "mlperf_log_summary.txt").read_text(encoding="utf-8"))
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
        if temp is not None:
            temp.cleanup()
    valid = is_valid(summary) and bridge.errors == 0
    shown = "(a temporary folder, removed)" if temp is not None else str(outdir)
    return Run(qps, valid, summary, bridge.errors, shown)


async def run_scenario(
    transport: Transport,
    opts: MlperfOptions,
    request_count: int,
    on_run: Callable[[Run], None] | None = None,
) -> MlperfResult:
    """Run the scenario (several LoadGen runs for ``server``) over prepared requests."""
    lg = _lg()
    if opts.scenario is Scenario.SERVER and opts.latency_bound_ms is None:
        raise InvalidArgumentError("--scenario server needs --latency-bound-ms")
    channels = OFFLINE_MAX_IN_FLIGHT if opts.scenario is not Scenario.SINGLE_STREAM else 1
    calibrated = await calibrate(transport, request_count, channels)
    runs: list[Run] = []
    if opts.scenario is not Scenario.SERVER:
        settings = _settings(lg, opts, calibrated, None)
        runs.append(await _one_run(lg, transport, opts, request_count, settings, None))
        if on_run is not None:
            on_run(runs[-1])
        return result_of(opts.scenario, runs)
    qps: float | None = opts.target_qps or max(1.0, round(calibrated[1] / 2))
    history: list[tuple[float, bool]] = []
    while qps is not None and len(runs) < opts.server_runs:
        settings = _settings(lg, opts, calibrated, qps)
        run = await _one_run(lg, transport, opts, request_count, settings, qps)
        runs.append(run)
        if on_run is not None:
            on_run(run)
        history.append((qps, run.valid))
        qps = next_target(history)
        if qps is not None:
            qps = round(qps, 1)
    return result_of(Scenario.SERVER, runs)
