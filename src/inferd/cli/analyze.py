"""``inferd analyze``: find the model config that serves best on this machine.

Each candidate config is loaded through the model control API (a load with a config override),
so the analyzer works on any server in explicit model-control mode; by default it starts its own
``inferd serve`` over the repository. Load is applied with ``inferd perf``'s load generator.

Exit codes: 0 a config was chosen, 1 the server could not be started or reached, or the model's
own config did not load, 2 usage error, 3 no config met every constraint, 130 interrupted
(the measurements so far are kept: run the same command again to resume).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from inferd.cli.analyze_args import CommandOptions, add_analyze_arguments, options_from_args
from inferd.cli.extras import missing_extra
from inferd.cli.running import CommandExit, run_reported
from inferd.client.progress import interactive
from inferd.errors import InvalidArgumentError
from inferd.tools.analyze.control import EngineControl, GrpcControl, HttpControl, ModelControl
from inferd.tools.analyze.memory import MemoryProbe
from inferd.tools.analyze.outputs import OutputPlan, write_outputs
from inferd.tools.analyze.progress import QuietReporter, Reporter, RichReporter
from inferd.tools.analyze.runner import Analyzer, ModelRun
from inferd.tools.analyze.server_process import start_analyzed_server
from inferd.tools.analyze.store import ResultStore
from inferd.tools.analyze.summary import summary_table
from inferd.tools.perf.transport import Transport

EXIT_OK, EXIT_SERVER, EXIT_USAGE, EXIT_NONE_FEASIBLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def add_analyze_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "analyze",
        help="search model configs (instances, batching, threads) for the best one",
        description=(
            "Measure a model under several configurations (instance count, max batch size, "
            "dynamic batching and its queue delay, preferred batch sizes, ONNX Runtime threads), "
            "each loaded through the model control API, and write the best one as config.pbtxt "
            "with a CSV and an HTML report. Several models are searched one after the other."
        ),
        epilog=(
            "examples:\n"
            "  inferd analyze simple --model-repository examples/models\n"
            "  inferd analyze digits --model-repository examples/models --latency-budget-ms 5 "
            "--output-repository tuned\n"
            "  inferd analyze digits --model-repository examples/models --search quick "
            "--budget 8 --concurrency 1,16\n"
            "  inferd analyze simple --model-repository /models -u localhost:8001 -i grpc\n"
            "exit codes: 0 a config was chosen, 1 server not started or unreachable, "
            "2 usage error, 3 no config met every constraint, 130 interrupted (rerun to resume)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_analyze_arguments(p)
    p.set_defaults(func=analyze_command)


@dataclass
class _Target:
    control: ModelControl
    make_transport: Callable[[str], Transport]
    memory: MemoryProbe
    in_process: bool = False


def _network_target(
    url: str, options: CommandOptions, pid: int | None, metrics: str | None
) -> _Target:
    """Control calls carry the extra headers and the admin token; requests the headers."""
    headers, token = options.connection.headers, options.admin_token
    if options.protocol == "grpc":
        from inferd.tools.perf.grpc_client import GrpcTransport

        grpc_tls = options.connection.grpc_tls

        def grpc_transport(model: str) -> Transport:
            return GrpcTransport(url, model, headers=headers, tls=grpc_tls)

        control = GrpcControl(url, headers=headers, admin_token=token, tls=grpc_tls)
        return _Target(control, grpc_transport, MemoryProbe(pid, metrics))
    from inferd.tools.perf.http_client import HttpTransport

    https = options.connection.https

    def http_transport(model: str) -> Transport:
        return HttpTransport(url, model, binary=True, headers=headers, tls=https)

    control_http = HttpControl(url, headers=headers, admin_token=token, tls=https)
    return _Target(control_http, http_transport, MemoryProbe(pid, metrics))


@asynccontextmanager
async def _target(options: CommandOptions) -> AsyncIterator[_Target]:
    """The server the analysis talks to, for as long as it runs."""
    models = options.analyze.models
    if options.protocol == "in-process":
        from inferd.cli.perf_inprocess import running_engine
        from inferd.tools.perf.inprocess import InProcessTransport

        async with running_engine(options.analyze.repository, models[0]) as engine:

            def local(model: str) -> Transport:
                return InProcessTransport(engine, model)

            yield _Target(EngineControl(engine), local, MemoryProbe(os.getpid(), None), True)
        return
    if options.url is not None:
        target = _network_target(options.url, options, None, options.metrics_url)
        try:
            yield target
        finally:
            await target.control.close()
        return
    server = await asyncio.to_thread(start_analyzed_server, options.analyze.repository, models)
    try:
        url = server.grpc_url if options.protocol == "grpc" else server.http_url
        target = _network_target(url, options, server.pid, None)
        try:
            yield target
        finally:
            await target.control.close()
    finally:
        await asyncio.to_thread(server.stop)


async def _analyze(
    options: CommandOptions, store: ResultStore, reporter: Reporter
) -> list[ModelRun]:
    async with _target(options) as target:
        analyzer = Analyzer(
            options.analyze,
            target.control,
            target.make_transport,
            target.memory,
            store,
            reporter,
            in_process=target.in_process,
        )
        runs = await analyzer.run()
        if options.url is not None:
            # leave the server as its repository says
            for model in options.analyze.models:
                await target.control.load(model)
        return runs


def _error(message: str) -> None:
    print(f"inferd analyze: error: {message}", file=sys.stderr, flush=True)


def _notes(options: CommandOptions, memory_source: str) -> list[str]:
    a = options.analyze
    goals = a.goals
    where = options.url or ("this process" if options.protocol == "in-process" else "own server")
    notes = [
        f"Objective: {goals.objective} ({goals.percentile} latency); server: {where} over "
        f"{a.measure.transport}; load points: concurrency "
        f"{', '.join(str(c) for c in a.measure.concurrency)}; window "
        f"{a.measure.measurement_interval_ms} ms; memory from {memory_source}.",
    ]
    return notes


def analyze_command(args: argparse.Namespace) -> int:
    missing = missing_extra("analyze", ("rich", "optuna", "plotly"))
    if missing is not None:
        _error(missing)
        return EXIT_USAGE
    try:
        options = options_from_args(args)
        store = ResultStore(options.results, options.analyze.measure.to_dict())
    except InvalidArgumentError as exc:
        _error(exc.message)
        return EXIT_USAGE
    goals = options.analyze.goals
    reporter: Reporter = (
        RichReporter(goals) if interactive(quiet=options.quiet) else QuietReporter(goals)
    )
    if store.skipped_lines:
        reporter.note(f"{store.skipped_lines} unreadable line(s) of {store.directory} skipped")
    interrupted = (
        f"interrupted; the measurements so far are kept in {options.results}: run the same "
        "command again to resume"
    )
    try:
        runs: list[ModelRun] = run_reported(
            _analyze(options, store, reporter),
            reporter,
            _error,
            interrupted=interrupted,
            failed=EXIT_SERVER,
        )
    except CommandExit as exc:
        return exc.code
    from rich.console import Console

    console = Console()
    for run in runs:
        console.print(summary_table(run.outcome, run.measured_now, run.resumed))
    memory_source = (
        "the server's /proc status"
        if options.url is None
        else (options.metrics_url or "nowhere (give --metrics-url)")
    )
    plan = OutputPlan(
        results_dir=options.results,
        repository=options.analyze.repository,
        output_repository=options.output_repository,
        apply=options.apply,
    )
    try:
        lines = write_outputs(runs, goals, plan, _notes(options, memory_source))
    except (OSError, InvalidArgumentError) as exc:
        _error(str(exc))
        return EXIT_USAGE
    for line in lines:
        print(line, flush=True)
    if any(run.outcome.best is None for run in runs):
        return EXIT_NONE_FEASIBLE
    return EXIT_OK
