"""``inferd analyze``'s flags, and their reading into typed options (nothing below this reads
argparse results)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from inferd.cli.admin_token import read_admin_token
from inferd.cli.common_args import results_group
from inferd.cli.perf_connection import Connection, add_connection_arguments, connection_from_args
from inferd.errors import InvalidArgumentError
from inferd.tools.analyze.measure import MeasureSettings
from inferd.tools.analyze.objective import Goals
from inferd.tools.analyze.runner import AUTO_GRID_LIMIT, AnalyzeOptions
from inferd.tools.analyze.space import (
    RangeChoices,
    parse_int_list,
    parse_preferred_list,
    parse_switch_list,
    parse_thread_list,
)
from inferd.tools.perf.inputs import parse_shape_options

DEFAULT_RESULTS = Path("analyze-results")
PERCENTILE_CHOICES = ("avg", "50", "90", "95", "99")


def add_analyze_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("models", nargs="+", metavar="MODEL", help="the model(s) to analyze")
    p.add_argument(
        "--model-repository",
        type=Path,
        required=True,
        metavar="DIR",
        help="the repository holding the models (the configs are read and written here)",
    )
    where = p.add_argument_group("the server measured")
    where.add_argument(
        "-u",
        "--url",
        metavar="HOST:PORT",
        help="a running server in explicit model-control mode (inferd or Triton); "
        "https://HOST:PORT for HTTP over TLS; without it, an `inferd serve` is started over the "
        "repository on free ports and stopped at the end",
    )
    where.add_argument(
        "-i",
        "--protocol",
        choices=("http", "grpc", "in-process"),
        default="http",
        help="how configs are loaded and requests sent; in-process runs inferd in this process, "
        "with no network (default: http)",
    )
    where.add_argument(
        "--admin-token-file",
        type=Path,
        metavar="FILE",
        help="with -u: the server's admin token (the file's content), sent as 'Authorization: "
        "Bearer <token>' on model control calls; the INFERD_ADMIN_TOKEN environment variable "
        "does the same, as for inferd serve",
    )
    where.add_argument(
        "--metrics-url",
        metavar="HOST:PORT",
        help="with -u: the server's metrics endpoint, read for process_resident_memory_bytes",
    )
    goals = p.add_argument_group("what makes a config best")
    goals.add_argument(
        "--objective",
        choices=("throughput", "latency"),
        default="throughput",
        help="throughput: the most inferences/s at a load point within the latency budget; "
        "latency: the lowest latency at a load point reaching --min-throughput "
        "(default: throughput)",
    )
    goals.add_argument("--latency-budget-ms", type=float, metavar="MS", help="latency limit")
    goals.add_argument(
        "--percentile",
        choices=PERCENTILE_CHOICES,
        default="99",
        help="the latency compared with the budget and minimised (default: 99)",
    )
    goals.add_argument("--min-throughput", type=float, metavar="N", help="inferences/s floor")
    goals.add_argument("--max-memory-mb", type=float, metavar="MB", help="server memory limit")
    search = p.add_argument_group("the search")
    search.add_argument(
        "--search",
        choices=("auto", "grid", "quick"),
        default="auto",
        help=f"grid: every config; quick: optuna's TPE sampler; auto: grid up to "
        f"{AUTO_GRID_LIMIT} configs, quick above (default: auto)",
    )
    search.add_argument(
        "--budget",
        type=int,
        metavar="N",
        help="configs measured per model besides its own (default: all for grid, a quarter "
        "of the space, at least 4, for quick)",
    )
    search.add_argument("--seed", type=int, default=0, help="the quick search's seed")
    search.add_argument(
        "--confirm",
        type=int,
        default=3,
        metavar="K",
        help="after the search, measure the model's own config and the K best once more and "
        "choose among them by the mean of both measurements; 0 skips it (default: 3)",
    )
    space = p.add_argument_group("the search space (comma-separated values to try)")
    space.add_argument(
        "--instances",
        metavar="LIST",
        help="CPU instance counts (default: 1, 2, 4 ... up to the cores)",
    )
    space.add_argument(
        "--max-batch-sizes",
        metavar="LIST",
        help="max_batch_size values with dynamic batching (default: the model's, plus 8 and 32 "
        "where smaller)",
    )
    space.add_argument(
        "--dynamic-batching", metavar="LIST", help="off, on or off,on (default: off,on)"
    )
    space.add_argument(
        "--queue-delays-us",
        metavar="LIST",
        help="max_queue_delay_microseconds (default: 0,100,1000)",
    )
    space.add_argument(
        "--preferred-batch-sizes",
        metavar="LIST",
        help="choices of preferred_batch_size: none, one size, or sizes joined by + "
        "(e.g. none,8,4+8; default: none)",
    )
    space.add_argument(
        "--threads",
        metavar="LIST",
        help="ONNX Runtime intra_op_thread_count values, auto for the runtime's own layout "
        "(default: auto,1 on a machine with several cores)",
    )
    space.add_argument(
        "--inter-op-threads", metavar="LIST", help="inter_op_thread_count values (default: auto)"
    )
    load = p.add_argument_group("the load applied to each config")
    load.add_argument(
        "--concurrency",
        metavar="LIST",
        help="the load points: client concurrencies (default: 1, 4x and 16x the cores)",
    )
    load.add_argument(
        "--measurement-interval",
        type=int,
        default=2000,
        metavar="MS",
        help="measurement window (default: 2000)",
    )
    load.add_argument(
        "--stability-percentage",
        type=float,
        default=10.0,
        metavar="PCT",
        help="a load point is stable when its last 3 windows agree within PCT (default: 10)",
    )
    load.add_argument(
        "--max-trials",
        type=int,
        default=10,
        metavar="N",
        help="at most N windows per load point (default: 10)",
    )
    load.add_argument(
        "--input-data",
        default="random",
        metavar="DATA",
        help="random, zero, or a file inferd perf reads (default: random)",
    )
    load.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2",
        help="the shape of an input with variable dims (repeatable)",
    )
    with results_group(
        p,
        default=DEFAULT_RESULTS,
        help="where measurements are stored as they come (a rerun resumes), with results.csv, "
        f"report.html and configs/ (default: {DEFAULT_RESULTS})",
    ) as out:
        out.add_argument(
            "--output-repository",
            type=Path,
            metavar="DIR",
            help="copy each model into DIR with its best config.pbtxt",
        )
        out.add_argument(
            "--apply",
            action="store_true",
            help="rewrite each model's config.pbtxt in place (the old one kept as "
            "config.pbtxt.orig)",
        )
    add_connection_arguments(p, sent_with="model control call and request, with -u")


@dataclass(frozen=True)
class CommandOptions:
    analyze: AnalyzeOptions
    url: str | None
    protocol: str
    metrics_url: str | None
    connection: Connection  # -H and TLS, for a server given with -u
    admin_token: str | None  # sent on model control calls
    results: Path
    output_repository: Path | None
    apply: bool
    quiet: bool


def available_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _positive(value: float | int | None, flag: str) -> None:
    if value is not None and value <= 0:
        raise InvalidArgumentError(f"{flag} must be above 0, got {value:g}")


def options_from_args(args: argparse.Namespace) -> CommandOptions:
    """Every flag checked and typed; InvalidArgumentError with one clear line otherwise."""
    repository: Path = args.model_repository
    if not repository.is_dir():
        raise InvalidArgumentError(f"--model-repository {repository} is not a directory")
    for model in args.models:
        if not (repository / model).is_dir():
            raise InvalidArgumentError(f"model '{model}' has no directory in {repository}")
    if len(set(args.models)) != len(args.models):
        raise InvalidArgumentError("a model is named twice")
    if args.protocol == "in-process" and args.url is not None:
        raise InvalidArgumentError("-i in-process runs the server here: leave out -u")
    connection, admin_token = _connection(args)
    if args.metrics_url is not None and args.url is None:
        raise InvalidArgumentError(
            "--metrics-url is for a server given with -u (the analyzer reads its own server's "
            "memory from /proc)"
        )
    for value, flag in (
        (args.latency_budget_ms, "--latency-budget-ms"),
        (args.min_throughput, "--min-throughput"),
        (args.max_memory_mb, "--max-memory-mb"),
        (args.budget, "--budget"),
        (args.measurement_interval, "--measurement-interval"),
        (args.stability_percentage, "--stability-percentage"),
        (args.max_trials, "--max-trials"),
    ):
        _positive(value, flag)
    if args.confirm < 0:
        raise InvalidArgumentError(f"--confirm must be 0 or more, got {args.confirm}")
    if args.max_trials < 3:
        raise InvalidArgumentError("--max-trials must be at least 3 (stability needs 3 windows)")
    if args.apply and args.output_repository is not None:
        raise InvalidArgumentError("give --apply or --output-repository, not both")
    if args.output_repository is not None and args.output_repository.resolve() == (
        repository.resolve()
    ):
        raise InvalidArgumentError(
            "--output-repository is the model repository itself; use --apply to change it in place"
        )
    cores = available_cores()
    concurrency = (
        parse_int_list(args.concurrency, "--concurrency", minimum=1)
        if args.concurrency is not None
        else tuple(sorted({1, 4 * cores, 16 * cores}))
    )
    goals = Goals(
        objective=args.objective,
        percentile="avg" if args.percentile == "avg" else f"p{args.percentile}",
        latency_budget_ms=args.latency_budget_ms,
        min_throughput=args.min_throughput,
        max_memory_mb=args.max_memory_mb,
    )
    transport = {"http": "http-binary", "grpc": "grpc", "in-process": "in-process"}
    measure = MeasureSettings(
        transport=transport[args.protocol],
        url=args.url or "",
        concurrency=concurrency,
        measurement_interval_ms=args.measurement_interval,
        stability_percentage=args.stability_percentage,
        max_trials=args.max_trials,
        input_data=(args.input_data,),
        shapes=tuple(parse_shape_options(args.shape).items()),
    )
    analyze = AnalyzeOptions(
        models=tuple(args.models),
        repository=repository,
        goals=goals,
        measure=measure,
        choices=_choices(args),
        search=args.search,
        budget=args.budget,
        seed=args.seed,
        cores=cores,
        confirm=args.confirm,
    )
    return CommandOptions(
        analyze=analyze,
        url=args.url,
        protocol=args.protocol,
        metrics_url=args.metrics_url,
        connection=connection,
        admin_token=admin_token,
        results=args.results,
        output_repository=args.output_repository,
        apply=args.apply,
        quiet=args.quiet,
    )


def _connection(args: argparse.Namespace) -> tuple[Connection, str | None]:
    """-H, TLS and the admin token: for a server given with -u (the analyzer's own server
    needs none of them, bar the token it inherits from INFERD_ADMIN_TOKEN)."""
    connection = connection_from_args(args, args.protocol, args.url)
    if args.protocol == "in-process":
        if args.admin_token_file is not None:
            raise InvalidArgumentError(
                "--admin-token-file is for a server given with -u; -i in-process calls the "
                "engine directly"
            )
        return connection, None
    if args.url is None:
        given = [
            flag
            for flag, value in (
                ("-H", connection.headers),
                ("--ssl-grpc-use-ssl", connection.grpc_tls),
                ("--admin-token-file", args.admin_token_file),
            )
            if value
        ]
        if given:
            raise InvalidArgumentError(
                f"{given[0]} is for a server given with -u; the server the analyzer starts has "
                "no restrictions and no TLS"
            )
    token = read_admin_token(args.admin_token_file, os.environ)
    if token is not None and any(name.lower() == "authorization" for name, _ in connection.headers):
        where = "--admin-token-file" if args.admin_token_file is not None else "INFERD_ADMIN_TOKEN"
        raise InvalidArgumentError(
            f"-H Authorization and the admin token of {where} would both be sent: give one"
        )
    return connection, token


def _choices(args: argparse.Namespace) -> RangeChoices:
    def ints(text: str | None, flag: str, minimum: int) -> tuple[int, ...] | None:
        return None if text is None else parse_int_list(text, flag, minimum=minimum)

    return RangeChoices(
        instances=ints(args.instances, "--instances", 1),
        max_batch_sizes=ints(args.max_batch_sizes, "--max-batch-sizes", 0),
        dynamic_batching=(
            None
            if args.dynamic_batching is None
            else parse_switch_list(args.dynamic_batching, "--dynamic-batching")
        ),
        queue_delays_us=ints(args.queue_delays_us, "--queue-delays-us", 0),
        preferred_batch_sizes=(
            None
            if args.preferred_batch_sizes is None
            else parse_preferred_list(args.preferred_batch_sizes, "--preferred-batch-sizes")
        ),
        intra_op_threads=(
            None if args.threads is None else parse_thread_list(args.threads, "--threads")
        ),
        inter_op_threads=(
            None
            if args.inter_op_threads is None
            else parse_thread_list(args.inter_op_threads, "--inter-op-threads")
        ),
    )
