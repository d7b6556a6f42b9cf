"""``inferd perf``: perf_analyzer's command line over inferd's load generator.

perf_analyzer's flags keep their meaning (``-p`` is the measurement interval, ``--percentile``
the percentile); its flags that are not carried out are refused by name (``perf_flags.py``).
``-i in-process --model-repository R`` starts inferd's server in this process, with no
listeners, on the same event loop as the load.

Exit codes: 0 ok, 1 the baseline gate failed, 2 usage or configuration error, 3 the server
could not be reached, refused the model's metadata (an unknown model...) or failed every request.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from inferd.cli.extras import missing_extra
from inferd.cli.perf_args import add_perf_arguments, options_from_args
from inferd.cli.perf_mlperf import (
    measure_scenario,
    mlperf_options_from_args,
    write_result,
)
from inferd.cli.running import run_async
from inferd.errors import InferdError, InvalidArgumentError
from inferd.tools.perf.driver import PerfRunError
from inferd.tools.perf.llm_metrics import LlmFigures
from inferd.tools.perf.mlperf import MlperfOptions, MlperfResult
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.progress import llm_window_text, progress_for
from inferd.tools.perf.report import (
    csv_text,
    gate_failures,
    json_text,
    point_text,
    summary_text,
)
from inferd.tools.perf.run import PerfResult, run_perf
from inferd.tools.perf.summary import LoadPoint
from inferd.tools.perf.transport import PerfRequestError, Transport

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
T = TypeVar("T")


def add_perf_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "perf",
        help="measure a model's throughput and latency like perf_analyzer",
        description=(
            "Load a model on a v2 server (inferd or Triton) over HTTP or gRPC, or on inferd "
            "in this process, and report throughput, latency percentiles, the server-side split "
            "and what the load cost, per load point. perf_analyzer's flags keep their meaning; "
            "the ones not carried out are refused by name."
        ),
        epilog=(
            "examples:\n"
            "  inferd perf -m simple --concurrency-range 1:8:2\n"
            "  inferd perf -m simple -i grpc --streaming -f out.csv\n"
            "  inferd perf -m simple --request-rate-range 500 --request-distribution poisson\n"
            "  inferd perf -m simple -i in-process --model-repository examples/models\n"
            "  inferd perf -m simple --json-output now.json --baseline before.json "
            "--fail-below 0.9\n"
            "exit codes: 0 ok, 1 below the baseline, 2 usage or configuration error, "
            "3 server unreachable, model refused, or every request failed"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_perf_arguments(p)
    p.set_defaults(func=perf_command)


class _Reporter:
    """The driver's progress sink: live display, verbose window lines, each point's text."""

    def __init__(self, options: PerfOptions, verbose: bool, in_process: bool) -> None:
        self._live = progress_for(options.quiet)
        self._quiet = options.quiet
        self._verbose = verbose
        self._in_process = in_process
        self._percentile = options.percentile

    def start_point(self, label: str, max_trials: int) -> None:
        if self._live is not None:
            self._live.start_point(label, max_trials)

    def window(self, index: int, throughput: float, latency_us: float, in_flight: int) -> None:
        if self._live is not None:
            self._live.window(index, throughput, latency_us, in_flight)
        if self._verbose:
            what = "Avg latency" if self._percentile is None else f"p{self._percentile} latency"
            print(
                f"  Pass [{index}] throughput: {throughput:g} infer/sec. "
                f"{what}: {int(latency_us)} usec",
                flush=True,
            )

    def llm_window(self, index: int, figures: LlmFigures) -> None:
        if self._live is not None:
            self._live.llm_window(index, figures)
        if self._verbose:
            print(f"  Pass [{index}] {llm_window_text(figures)}", flush=True)

    def end_point(self, point: LoadPoint) -> None:
        if self._live is not None:
            self._live.end_point(point)
        if not self._quiet:
            print(point_text(point, in_process=self._in_process) + "\n", flush=True)


def _settings_block(settings: dict[str, Any]) -> str:
    pct = settings["percentile"]
    lines = [
        "*** Measurement Settings ***",
        f"  Batch size: {settings['batch_size']}",
        f"  Transport: {settings['transport']}"
        + (f" ({settings['url']})" if settings["url"] else "")
        + (" over TLS" if settings["tls"] else ""),
        '  Using "time_windows" mode for stabilization',
        f"  Stabilizing using {'average latency' if pct is None else f'p{pct} latency'} "
        "and throughput",
        f"  Measurement window: {settings['measurement_interval_ms']} msec",
    ]
    if settings["mode"] == "request-rate":
        lines.append(f"  Request distribution: {settings['request_distribution']}")
    if settings["sequence_model"]:
        lines.append(f"  Sequence length: {settings['sequence_length']}")
    lines.append(f"  Server CPU from: {settings['server_cpu_source']}")
    lines.append(f"  Energy from: {settings['energy_source']}")
    return "\n".join(lines) + "\n"


async def _network_transport(options: PerfOptions) -> Transport:
    if options.transport == "openai":
        from inferd.cli.perf_llm import openai_transport

        return openai_transport(options)
    if options.transport.startswith("http"):
        from inferd.tools.perf.http_client import HttpTransport

        return HttpTransport(
            options.url,
            options.model,
            options.version,
            binary=options.transport == "http-binary",
            headers=options.headers,
            tls=options.https,
        )
    from inferd.tools.perf.grpc_client import GrpcTransport

    return GrpcTransport(
        options.url,
        options.model,
        options.version,
        streaming=options.transport == "grpc-stream",
        headers=options.headers,
        tls=options.grpc_tls,
    )


Measure = Callable[[Transport, bool], Awaitable[T]]


async def _with_transport(options: PerfOptions, repository: Path | None, measure: Measure[T]) -> T:
    """``measure(transport, in_process)`` over the network, or over inferd in this process."""
    if options.transport != "in-process":
        transport = await _network_transport(options)
        try:
            return await measure(transport, False)
        finally:
            await transport.close()

    from inferd.cli.perf_inprocess import running_engine
    from inferd.tools.perf.inprocess import InProcessTransport

    assert repository is not None
    async with running_engine(repository, options.model) as engine:
        local = InProcessTransport(engine, options.model, options.version)
        try:
            return await measure(local, True)
        finally:
            await local.close()


async def _measure(options: PerfOptions, repository: Path | None, verbose: bool) -> PerfResult:
    def show(settings: dict[str, Any]) -> None:
        if not options.quiet:
            print(_settings_block(settings), flush=True)

    async def measure(transport: Transport, in_process: bool) -> PerfResult:
        reporter = _Reporter(options, verbose, in_process)
        return await run_perf(
            options, transport, progress=reporter, on_settings=show, in_process=in_process
        )

    return await _with_transport(options, repository, measure)


async def _scenario(
    options: PerfOptions, mlperf: MlperfOptions, repository: Path | None
) -> MlperfResult:
    async def measure(transport: Transport, in_process: bool) -> MlperfResult:
        return await measure_scenario(options, mlperf, transport)

    return await _with_transport(options, repository, measure)


def _error(message: str) -> None:
    print(f"inferd perf: error: {message}", file=sys.stderr, flush=True)


def _read_baseline(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read the baseline '{path}': {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"the baseline '{path}' is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise InvalidArgumentError(f"the baseline '{path}' is not an inferd perf JSON document")
    return document


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InvalidArgumentError(f"cannot write '{path}': {exc.strerror}") from exc


def perf_command(args: argparse.Namespace) -> int:
    missing = missing_extra("perf", ("rich",))
    if missing is not None:
        _error(missing)
        return EXIT_USAGE
    try:
        options = options_from_args(args)
        mlperf = mlperf_options_from_args(args)
        if mlperf is not None:
            if options.transport == "openai":
                raise InvalidArgumentError(
                    "--scenario measures tensor models: leave it out with -i openai"
                )
            return _scenario_command(options, mlperf, args.model_repository)
        baseline = _read_baseline(args.baseline) if args.baseline is not None else None
        result = run_async(_measure(options, args.model_repository, args.verbose))
    except (PerfRunError, PerfRequestError) as exc:
        _error(exc.message)
        return EXIT_UNREACHABLE
    except InvalidArgumentError as exc:
        _error(exc.message)
        return EXIT_USAGE
    except InferdError as exc:  # the in-process server could not start, the model is absent...
        _error(exc.message)
        return EXIT_USAGE if args.protocol == "in-process" else EXIT_UNREACHABLE
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    points = result.points
    print(summary_text(points), flush=True)
    for note in result.notes:
        print(f"Note: {note}", flush=True)
    try:
        if options.csv_file is not None:
            _write(options.csv_file, csv_text(points, verbose=options.verbose_csv))
        if options.json_file is not None:
            _write(options.json_file, json_text(points, result.settings, result.notes))
        failed = [p for p in points if p.request_count == 0]  # -i openai reports them
        if failed:
            errors = "; ".join(failed[0].errors) or "no message"
            _error(f"every request failed at {failed[0].mode} {failed[0].level_label}: {errors}")
            return EXIT_UNREACHABLE
        if baseline is None:
            return EXIT_OK
        failures = gate_failures(points, baseline, args.fail_below, check_p99=args.fail_p99)
    except InvalidArgumentError as exc:
        _error(exc.message)
        return EXIT_USAGE
    if failures:
        print(f"Baseline gate FAILED ({args.baseline}):", flush=True)
        for failure in failures:
            print(f"  {failure}", flush=True)
        return EXIT_GATE
    print(f"Baseline gate passed: every point at or above {args.fail_below:g} x the baseline")
    return EXIT_OK


def _scenario_command(options: PerfOptions, mlperf: MlperfOptions, repository: Path | None) -> int:
    """``--scenario``: LoadGen's run(s), the result in MLPerf's terms; errors raise to the
    caller's exit-code mapping."""
    result = run_async(_scenario(options, mlperf, repository))
    print(result.text(), flush=True)
    if options.json_file is not None:
        settings = {
            "model": options.model,
            "transport": options.transport,
            "url": options.url,
            "batch_size": options.batch_size,
            "min_duration_ms": mlperf.min_duration_ms,
            "min_query_count": mlperf.min_query_count,
            "latency_bound_ms": mlperf.latency_bound_ms,
            "samples_per_query": mlperf.samples_per_query,
        }
        write_result(options.json_file, result, settings)
    return EXIT_OK
