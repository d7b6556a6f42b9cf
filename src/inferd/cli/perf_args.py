"""``inferd perf``'s flags (perf_analyzer's names and meanings) and their reading into
:class:`PerfOptions`; every check of one flag against another happens here, once."""

from __future__ import annotations

import argparse
from pathlib import Path

from inferd.cli.perf_connection import add_connection_arguments, connection_from_args
from inferd.cli.perf_flags import add_refused_flags, positive_float, positive_int
from inferd.cli.perf_llm import add_llm_arguments, llm_options_from_args
from inferd.cli.perf_mlperf import add_mlperf_arguments
from inferd.errors import InvalidArgumentError
from inferd.tools.perf.inputs import parse_shape_options
from inferd.tools.perf.options import Distribution, LoadMode, PerfOptions, parse_range
from inferd.tools.perf.schedules import read_intervals

DEFAULT_URLS = {"http": "localhost:8000", "grpc": "localhost:8001", "openai": "localhost:8000"}


def _protocol(text: str) -> str:
    value = text.lower()
    if value not in ("http", "grpc", "in-process", "openai"):
        raise argparse.ArgumentTypeError(f"'{text}' is not one of http, grpc, in-process, openai")
    return value


def add_perf_arguments(p: argparse.ArgumentParser) -> None:
    target = p.add_argument_group("model and server")
    target.add_argument(
        "-m", "--model", dest="model", required=True, help="the model to load (required)"
    )
    target.add_argument("-x", dest="model_version", default="", help="its version (default latest)")
    target.add_argument(
        "-u",
        dest="url",
        help="host:port of the server (default localhost:8000, gRPC 8001); https://HOST:PORT "
        "for HTTP over TLS",
    )
    target.add_argument(
        "-i",
        dest="protocol",
        type=_protocol,
        default="http",
        help="http (default), grpc, in-process (inferd here, with --model-repository), or "
        "openai (the server's OpenAI-compatible /v1 API: LLM load and figures)",
    )
    target.add_argument(
        "--model-repository",
        type=Path,
        help="the repository the in-process server loads the model from (-i in-process)",
    )
    target.add_argument(
        "--service-kind",
        default="triton",
        help="only 'triton' (the v2 protocol); triton_c_api is -i in-process",
    )
    wire = p.add_argument_group("how requests travel")
    fmt = wire.add_mutually_exclusive_group()
    fmt.add_argument(
        "--binary",
        dest="tensor_format",
        action="store_const",
        const="binary",
        help="HTTP: tensors in the binary extension (the default)",
    )
    fmt.add_argument(
        "--json",
        dest="tensor_format",
        action="store_const",
        const="json",
        help="HTTP: tensors as JSON",
    )
    fmt.add_argument(
        "--input-tensor-format",
        dest="tensor_format",
        choices=("binary", "json"),
        help="perf_analyzer's name for --binary / --json",
    )
    wire.add_argument(
        "--output-tensor-format",
        choices=("binary", "json"),
        help="HTTP: must match the input format (answers come in the format asked for)",
    )
    wire.add_argument(
        "--streaming",
        action="store_true",
        help="gRPC: the bidi stream; -i openai: streamed answers (server-sent events)",
    )
    wire.add_argument(
        "-a",
        "--async",
        dest="async_mode",
        action="store_true",
        help="accepted: every context already sends from one event loop",
    )
    wire.add_argument(
        "--sync",
        action="store_true",
        help="accepted: a context waits for each answer before its next send",
    )
    load = p.add_argument_group("load")
    load.add_argument("-b", dest="batch_size", type=positive_int, default=1, help="batch size")
    load.add_argument("--concurrency-range", help="START[:END[:STEP]] closed-loop contexts")
    load.add_argument(
        "-t",
        dest="concurrency",
        type=positive_int,
        help="one concurrency (perf_analyzer's older flag)",
    )
    load.add_argument("--request-rate-range", help="START[:END[:STEP]] requests per second")
    load.add_argument(
        "--request-distribution",
        choices=("constant", "poisson"),
        help="gaps between sends at a request rate (default constant)",
    )
    load.add_argument(
        "--request-intervals",
        type=Path,
        help="a file of send gaps in microseconds, one per line (cycled)",
    )
    load.add_argument(
        "--num-of-sequences",
        type=positive_int,
        default=4,
        help="open loop on a sequence model: sequences under way at once",
    )
    load.add_argument(
        "--sequence-length",
        type=positive_int,
        default=20,
        help="requests per sequence for sequence models (default 20)",
    )
    load.add_argument(
        "--seed", type=int, default=0, help="seed of the Poisson schedule and of random input data"
    )
    data = p.add_argument_group("input data")
    data.add_argument(
        "--input-data",
        action="append",
        help="random (default), zero, a perf_analyzer JSON file, a directory, "
        ".npz or .parquet; repeat for several files",
    )
    data.add_argument("-z", dest="zero", action="store_true", help="same as --input-data zero")
    data.add_argument(
        "--shape",
        action="append",
        default=[],
        help="NAME:D1,D2 for an input with variable dims; repeatable",
    )
    data.add_argument(
        "--string-length", type=positive_int, default=128, help="length of random strings"
    )
    data.add_argument("--string-data", help="the string every BYTES element holds")
    measure = p.add_argument_group("measurement")
    measure.add_argument(
        "-p",
        "--measurement-interval",
        type=positive_int,
        default=5000,
        metavar="MS",
        help="window length in ms (default 5000)",
    )
    measure.add_argument(
        "-s",
        "--stability-percentage",
        type=positive_float,
        default=10.0,
        help="max/min spread of the last 3 windows (default 10)",
    )
    measure.add_argument(
        "-r",
        "--max-trials",
        type=positive_int,
        default=10,
        help="windows at most per load point (default 10)",
    )
    measure.add_argument(
        "--percentile", type=int, help="stabilise on this latency percentile instead of the average"
    )
    measure.add_argument(
        "-l",
        "--latency-threshold",
        type=positive_float,
        metavar="MS",
        help="visit no higher load once the latency is above this",
    )
    measure.add_argument(
        "--slip-bound-us",
        type=positive_float,
        default=2000.0,
        help="open loop: a send later than this is late (default 2000)",
    )
    out = p.add_argument_group("reports and cost")
    out.add_argument("-f", dest="csv_file", type=Path, help="CSV in perf_analyzer's columns")
    out.add_argument(
        "--verbose-csv",
        action="store_true",
        help="add Avg latency, request/response and response wait columns",
    )
    out.add_argument("--json-output", type=Path, help="every figure as JSON (a --baseline)")
    out.add_argument(
        "--server-pid",
        type=positive_int,
        help="a local server's process id: its CPU and memory per load point",
    )
    out.add_argument(
        "--metrics-url",
        help="host:port[/metrics] of the server's Prometheus endpoint: its "
        "process_cpu_seconds_total when --server-pid is not given, and what --collect-metrics "
        "reads (default there: port 8002 on -u's host)",
    )
    out.add_argument(
        "--collect-metrics",
        action="store_true",
        help="read the server's GPU gauges (nv_gpu_utilization, nv_gpu_power_usage, "
        "nv_gpu_memory_used_bytes, nv_energy_consumption) and host CPU gauges while measuring; "
        "each point reports their mean / max per GPU and GPU energy per 1000 inferences",
    )
    out.add_argument(
        "--metrics-interval",
        type=positive_float,
        default=1000.0,
        metavar="MS",
        help="--collect-metrics: milliseconds between reads of the metrics endpoint (default 1000)",
    )
    out.add_argument("--baseline", type=Path, help="a --json-output file to compare with")
    out.add_argument(
        "--fail-below",
        type=positive_float,
        default=0.9,
        help="exit 1 if a point's throughput is below this x the baseline's",
    )
    out.add_argument(
        "--fail-p99",
        action="store_true",
        help="also exit 1 if a point's p99 is above the baseline's / --fail-below",
    )
    out.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no live display and no per-point text: the summary lines only",
    )
    out.add_argument("-v", dest="verbose", action="store_true", help="print every window")
    add_llm_arguments(p)
    add_connection_arguments(p)
    add_mlperf_arguments(p)
    add_refused_flags(p)


def _transport(args: argparse.Namespace) -> str:
    protocol = args.protocol
    fmt = args.tensor_format
    if args.streaming and protocol not in ("grpc", "openai"):
        raise InvalidArgumentError("--streaming needs -i grpc or -i openai")
    if fmt is not None and protocol != "http":
        raise InvalidArgumentError("--binary / --json / --input-tensor-format need -i http")
    if args.output_tensor_format is not None and args.output_tensor_format != (fmt or "binary"):
        raise InvalidArgumentError(
            "--output-tensor-format must match the input format: give --binary or --json"
        )
    if (protocol == "in-process") != (args.model_repository is not None):
        raise InvalidArgumentError("-i in-process and --model-repository go together")
    if protocol == "in-process" and args.url is not None:
        raise InvalidArgumentError("-u names a server: leave it out with -i in-process")
    if protocol == "http":
        return "http-json" if fmt == "json" else "http-binary"
    if protocol == "grpc":
        return "grpc-stream" if args.streaming else "grpc"
    if protocol == "openai":
        return "openai"
    return "in-process"


def _load(args: argparse.Namespace) -> dict[str, object]:
    given = [
        name
        for name, value in (
            ("--concurrency-range", args.concurrency_range or args.concurrency),
            ("--request-rate-range", args.request_rate_range),
            ("--request-intervals", args.request_intervals),
        )
        if value
    ]
    if len(given) > 1:
        raise InvalidArgumentError(f"{' and '.join(given)} cannot be combined: choose one")
    if args.request_distribution is not None and not args.request_rate_range:
        raise InvalidArgumentError("--request-distribution applies to --request-rate-range only")
    if args.request_rate_range:
        return {
            "mode": LoadMode.REQUEST_RATE,
            "request_rate": parse_range(
                args.request_rate_range, what="--request-rate-range", integer=False
            ),
            "distribution": Distribution(args.request_distribution or "constant"),
        }
    if args.request_intervals:
        return {"mode": LoadMode.INTERVALS, "intervals_us": read_intervals(args.request_intervals)}
    text = args.concurrency_range or str(args.concurrency or 1)
    return {
        "mode": LoadMode.CONCURRENCY,
        "concurrency": parse_range(text, what="--concurrency-range", integer=True),
    }


def options_from_args(args: argparse.Namespace) -> PerfOptions:
    """The typed options; InvalidArgumentError names the first flag that cannot work."""
    if args.service_kind not in ("triton", "triton_c_api"):
        raise InvalidArgumentError(
            f"--service-kind {args.service_kind} is not supported: inferd perf speaks Triton's "
            "v2 protocol (--service-kind triton)"
        )
    if args.service_kind == "triton_c_api" and args.protocol != "in-process":
        raise InvalidArgumentError("--service-kind triton_c_api: use -i in-process instead")
    if args.percentile is not None and not 0 < args.percentile < 100:
        raise InvalidArgumentError("--percentile must be between 1 and 99")
    if args.zero and args.input_data:
        raise InvalidArgumentError("-z and --input-data cannot be combined: choose one")
    transport = _transport(args)
    llm = llm_options_from_args(args)
    connection = connection_from_args(args, args.protocol, args.url)
    input_data = tuple(args.input_data or (["zero"] if args.zero else ["random"]))
    return PerfOptions(
        model=args.model,
        version=args.model_version,
        transport=transport,
        url="" if transport == "in-process" else args.url or DEFAULT_URLS[args.protocol],
        headers=connection.headers,
        https=connection.https,
        grpc_tls=connection.grpc_tls,
        batch_size=args.batch_size,
        measurement_interval_ms=args.measurement_interval,
        stability_percentage=args.stability_percentage,
        max_trials=args.max_trials,
        percentile=args.percentile,
        sequence_length=args.sequence_length,
        num_sequences=args.num_of_sequences,
        seed=args.seed,
        slip_bound_us=args.slip_bound_us,
        input_data=input_data,
        shapes=tuple(parse_shape_options(args.shape).items()),
        string_length=args.string_length,
        string_data=args.string_data,
        latency_threshold_ms=args.latency_threshold,
        server_pid=args.server_pid,
        metrics_url=args.metrics_url,
        collect_metrics=args.collect_metrics,
        metrics_interval_ms=args.metrics_interval,
        csv_file=args.csv_file,
        verbose_csv=args.verbose_csv,
        json_file=args.json_output,
        quiet=args.quiet,
        llm=llm,
        **_load(args),  # type: ignore[arg-type]
    )
