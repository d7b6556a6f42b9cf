"""``inferd perf --scenario``: MLPerf's scenarios through MLCommons LoadGen, from the flags to
the printed result in MLPerf's terms."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from inferd.cli.perf_flags import positive_float, positive_int
from inferd.errors import InvalidArgumentError
from inferd.tools.perf.mlperf import MlperfOptions, MlperfResult, Run, Scenario, run_scenario
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.run import prepare
from inferd.tools.perf.transport import Transport


def add_mlperf_arguments(p: argparse.ArgumentParser) -> None:
    lg = p.add_argument_group(
        "MLPerf scenarios (MLCommons LoadGen drives the load instead of the ranges above)"
    )
    lg.add_argument(
        "--scenario",
        choices=[s.value for s in Scenario],
        help="single-stream (p90), multi-stream (p99), server (highest QPS within "
        "--latency-bound-ms), offline (samples/s)",
    )
    lg.add_argument(
        "--latency-bound-ms",
        type=positive_float,
        help="server: the p99 latency a run must meet",
    )
    lg.add_argument(
        "--samples-per-query",
        type=positive_int,
        default=8,
        help="multi-stream: samples per query (default 8)",
    )
    lg.add_argument(
        "--target-qps",
        type=positive_float,
        help="server: the first target of the search; offline: the expected samples/s "
        "(default: measured before the run)",
    )
    lg.add_argument(
        "--min-duration-ms",
        type=positive_int,
        default=10_000,
        help="LoadGen's minimum run duration (default 10000)",
    )
    lg.add_argument(
        "--min-query-count",
        type=positive_int,
        default=100,
        help="LoadGen's minimum query count (default 100)",
    )
    lg.add_argument(
        "--server-runs",
        type=positive_int,
        default=6,
        help="server: LoadGen runs of the QPS search at most (default 6)",
    )
    lg.add_argument("--mlperf-log-dir", type=Path, help="keep LoadGen's logs in this folder")


_LOADGEN_ONLY = (
    ("latency_bound_ms", "--latency-bound-ms"),
    ("target_qps", "--target-qps"),
    ("mlperf_log_dir", "--mlperf-log-dir"),
)
_NOT_WITH_SCENARIO = (
    ("concurrency_range", "--concurrency-range"),
    ("concurrency", "-t"),
    ("request_rate_range", "--request-rate-range"),
    ("request_intervals", "--request-intervals"),
    ("csv_file", "-f"),
    ("baseline", "--baseline"),
    ("latency_threshold", "--latency-threshold"),
    ("percentile", "--percentile"),
)


def mlperf_options_from_args(args: argparse.Namespace) -> MlperfOptions | None:
    """The scenario options, or None without --scenario (refusing scenario-only flags then)."""
    if args.scenario is None:
        for dest, flag in _LOADGEN_ONLY:
            if getattr(args, dest) is not None:
                raise InvalidArgumentError(f"{flag} applies to --scenario runs only")
        return None
    for dest, flag in _NOT_WITH_SCENARIO:
        if getattr(args, dest):
            raise InvalidArgumentError(
                f"{flag} cannot be used with --scenario: MLCommons LoadGen drives the load"
            )
    scenario = Scenario(args.scenario)
    if scenario is Scenario.SERVER and args.latency_bound_ms is None:
        raise InvalidArgumentError("--scenario server needs --latency-bound-ms")
    return MlperfOptions(
        scenario=scenario,
        latency_bound_ms=args.latency_bound_ms,
        samples_per_query=args.samples_per_query,
        target_qps=args.target_qps,
        min_duration_ms=args.min_duration_ms,
        min_query_count=args.min_query_count,
        log_dir=args.mlperf_log_dir,
        server_runs=args.server_runs,
    )


def _run_line(run: Run, scenario: Scenario) -> str:
    s = run.summary
    verdict = "VALID" if run.valid else "INVALID"
    errors = f", {run.errors} failed requests" if run.errors else ""
    if scenario is Scenario.SERVER:
        p99 = s.get("99.00 percentile latency (ns)")
        shown = f"p99 {float(p99) / 1000:.0f} usec" if p99 else "p99 unknown"
        done = s.get("Completed samples per second", "?")
        return (
            f"  target {run.target_qps:g} QPS: {shown}, completed {done} samples/s — "
            f"{verdict}{errors}"
        )
    return f"  LoadGen run: {verdict}{errors} (logs: {run.log_dir})"


async def measure_scenario(
    options: PerfOptions, mlperf: MlperfOptions, transport: Transport
) -> MlperfResult:
    model, count = await prepare(options, transport)
    if model.sequence:
        raise InvalidArgumentError(
            f"model '{model.name}' is a sequence model: LoadGen's samples carry no sequence; "
            "measure it without --scenario"
        )
    if not options.quiet:
        print(
            f"*** MLPerf {mlperf.scenario.value} (MLCommons LoadGen) ***\n"
            f"  Model: {model.name}, transport: {options.transport} {options.url}".rstrip(),
            flush=True,
        )

    def show(run: Run) -> None:
        if not options.quiet:
            print(_run_line(run, mlperf.scenario), flush=True)

    return await run_scenario(transport, mlperf, count, on_run=show)


def result_json(result: MlperfResult, settings: dict[str, Any]) -> str:
    data = asdict(result)
    data["scenario"] = result.scenario.value
    return (
        json.dumps(
            {"format": "inferd-perf-mlperf/1", "settings": settings, "result": data},
            indent=2,
            default=str,
        )
        + "\n"
    )


def write_result(path: Path, result: MlperfResult, settings: dict[str, Any]) -> None:
    try:
        path.write_text(result_json(result, settings), encoding="utf-8")
    except OSError as exc:
        raise InvalidArgumentError(f"cannot write '{path}': {exc.strerror}") from exc
