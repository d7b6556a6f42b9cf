"""What a run reports: perf_analyzer's CSV, a JSON document, the terminal text, and the
verdicts drawn from the figures (the client as bottleneck, a baseline gate). Pure: strings and
dictionaries in and out; the CLI writes the files."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from inferd.errors import InvalidArgumentError
from inferd.tools.perf.llm_metrics import LLM_PERCENTILES, LlmFigures, Spread
from inferd.tools.perf.server_metrics import ServerMetrics
from inferd.tools.perf.summary import LoadPoint

JSON_FORMAT = "inferd-perf/1"
CLIENT_CPU_BOUND = 0.9  # share of one core at which the client is the bottleneck
LATE_SHARE_BOUND = 0.01  # open loop: share of sends later than the slip bound (perf_analyzer: 1%)


def _us(value: float) -> int:
    return int(value)


def _number(value: float) -> str:
    """A double as C++ streams print it by default (six significant digits)."""
    return format(value, "g")


def csv_header(mode: str, percentile: int | None, verbose: bool) -> list[str]:
    """perf_analyzer's CSV header (``--verbose-csv`` adds the last columns)."""
    first = "Concurrency" if mode == "concurrency" else "Request Rate"
    wanted = sorted({50, 90, 95, 99, *((percentile,) if percentile is not None else ())})
    header = [
        first,
        "Inferences/Second",
        "Client Send",
        "Network+Server Send/Recv",
        "Server Queue",
        "Server Compute Input",
        "Server Compute Infer",
        "Server Compute Output",
        "Client Recv",
        *(f"p{p} latency" for p in wanted),
    ]
    if verbose:
        if percentile is None:
            header.append("Avg latency")
        header += ["request/response", "response wait"]
    return header


METRICS_CSV_HEADER = [
    "Avg GPU Utilization",
    "Avg GPU Power Usage",
    "Max GPU Memory Usage",
    "Total GPU Memory",
]


def metrics_csv_cells(metrics: ServerMetrics | None) -> list[str]:
    """perf_analyzer's GPU cells: ``<uuid>:<value>;`` per GPU, a trailing semicolon each."""
    if metrics is None:
        return ["", "", "", ""]
    return [
        "".join(f"{uuid}:{_number(value)};" for uuid, value in per_gpu.items())
        for per_gpu in (
            metrics.gpu_utilization,
            metrics.gpu_power_w,
            {u: float(int(v)) for u, v in metrics.gpu_memory_used_bytes.items()},
            {u: float(int(v)) for u, v in metrics.gpu_memory_total_bytes.items()},
        )
    ]


def metrics_lines(metrics: ServerMetrics) -> list[str]:
    """The server's gauges of one point, per GPU, as perf_analyzer prints them."""
    lines = ["  Server Prometheus Metrics: "]
    shown: list[tuple[str, dict[str, float], str]] = [
        ("Avg GPU Utilization", metrics.gpu_utilization, "{:.0%}"),
        ("Avg GPU Power Usage", metrics.gpu_power_w, "{:.1f} watts"),
        ("Max GPU Memory Usage", metrics.gpu_memory_used_bytes, "{:.0f} bytes"),
        ("Total GPU Memory", metrics.gpu_memory_total_bytes, "{:.0f} bytes"),
    ]
    for title, per_gpu, fmt in shown:
        if per_gpu:
            lines.append(f"    {title}:")
            lines += [f"      {uuid} : {fmt.format(value)}" for uuid, value in per_gpu.items()]
    if metrics.cpu_utilization is not None:
        lines.append(f"    Avg CPU Utilization: {metrics.cpu_utilization:.0%}")
    if metrics.cpu_memory_used_bytes is not None:
        lines.append(f"    Max CPU Memory Usage: {int(metrics.cpu_memory_used_bytes)} bytes")
    return lines


def llm_csv_header() -> list[str]:
    """The columns the ``openai`` transport adds (times in usec, as the others)."""
    pcts = [f"p{p}" for p in LLM_PERCENTILES]
    return [
        "Requests/Second",
        "Output Tokens/Second",
        "Failed Requests",
        "Avg Input Tokens",
        "Avg Output Tokens",
        "Avg Time To First Token",
        *(f"{p} Time To First Token" for p in pcts),
        "Avg Inter Token Latency",
        *(f"{p} Inter Token Latency" for p in pcts),
        *(f"{p} Request Latency" for p in pcts),
        "Avg Output Tokens/Second/Request",
        *(f"{p} Output Tokens/Second/Request" for p in pcts),
    ]


def _spread_cells(spread: Spread | None, *, avg: bool, integer: bool) -> list[str]:
    """The average (if asked) and percentiles; empty cells when not defined."""
    count = len(LLM_PERCENTILES) + (1 if avg else 0)
    if spread is None:
        return [""] * count
    values = ([spread.avg] if avg else []) + [spread.percentiles[p] for p in LLM_PERCENTILES]
    return [str(int(v)) if integer else _number(v) for v in values]


def llm_csv_cells(llm: LlmFigures, error_count: int) -> list[str]:
    return [
        _number(llm.requests_per_s),
        _number(llm.output_tokens_per_s),
        str(error_count),
        _number(llm.avg_input_tokens),
        _number(llm.avg_output_tokens),
        *_spread_cells(llm.ttft_us, avg=True, integer=True),
        *_spread_cells(llm.itl_us, avg=True, integer=True),
        *_spread_cells(llm.latency_us, avg=False, integer=True),
        *_spread_cells(llm.tokens_per_s_per_request, avg=True, integer=False),
    ]


def csv_text(points: Sequence[LoadPoint], *, verbose: bool = False) -> str:
    """The load points as perf_analyzer writes them with ``-f`` (rows by rising throughput)."""
    if not points:
        return ""
    mode = points[0].mode
    percentile = points[0].stabilising_percentile
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    llm = any(p.llm is not None for p in points)
    # perf_analyzer writes the GPU columns with --verbose-csv when it collected metrics
    gpu = verbose and any(p.server_metrics is not None for p in points)
    writer.writerow(
        csv_header(mode, percentile, verbose)
        + (METRICS_CSV_HEADER if gpu else [])
        + (llm_csv_header() if llm else [])
    )
    for p in sorted(points, key=lambda p: p.throughput):
        s = p.server
        level = str(int(p.level)) if mode == "concurrency" else _number(p.level)
        row = [
            level,
            _number(p.throughput),
            "0",  # requests are built before measuring: nothing left to marshal per send
            str(_us(s.network_us)) if s else "0",
            str(_us(s.queue_us)) if s else "0",
            str(_us(s.compute_input_us)) if s else "0",
            str(_us(s.compute_infer_us)) if s else "0",
            str(_us(s.compute_output_us)) if s else "0",
            "0",
            *(str(_us(v)) for _, v in sorted(p.percentiles_us.items())),
        ]
        if verbose:
            if percentile is None:
                row.append(str(_us(p.avg_latency_us)))
            row += ["0", str(_us(p.avg_latency_us))]
        if gpu:
            row += metrics_csv_cells(p.server_metrics)
        if p.llm is not None:
            row += llm_csv_cells(p.llm, p.error_count)
        writer.writerow(row)
    return out.getvalue()


def point_dict(point: LoadPoint) -> dict[str, Any]:
    data = asdict(point)
    data["percentiles_us"] = {str(k): v for k, v in point.percentiles_us.items()}
    data["late_share"] = point.late_share
    data["errors"] = list(point.errors)
    data["llm"] = None if point.llm is None else point.llm.as_dict()
    return data


def json_document(
    points: Sequence[LoadPoint], settings: Mapping[str, Any], notes: Sequence[str] = ()
) -> dict[str, Any]:
    """Every figure of the run, with the settings that produced it."""
    return {
        "format": JSON_FORMAT,
        "settings": dict(settings),
        "points": [point_dict(p) for p in points],
        "notes": list(notes),
    }


def json_text(
    points: Sequence[LoadPoint], settings: Mapping[str, Any], notes: Sequence[str] = ()
) -> str:
    return json.dumps(json_document(points, settings, notes), indent=2, default=str) + "\n"


# -- verdicts -------------------------------------------------------------------------------


def client_verdict(point: LoadPoint, *, in_process: bool) -> str | None:
    """A plain sentence when the load generator, not the server, limited this point."""
    if point.mode != "concurrency" and point.late_share > LATE_SHARE_BOUND:
        return (
            f"client bottleneck: {point.late_share:.1%} of the sends left more than the slip "
            f"bound behind schedule (worst {point.max_slip_us:.0f} usec); the server's limit "
            "was not measured at this rate"
        )
    if not in_process and point.client_cpu_share >= CLIENT_CPU_BOUND:
        return (
            f"client bottleneck: the load generator used {point.client_cpu_share:.0%} of one "
            "core; the throughput is the client's limit, not the server's"
        )
    return None


def gate_failures(
    points: Sequence[LoadPoint],
    baseline: Mapping[str, Any],
    ratio: float,
    *,
    check_p99: bool = False,
) -> list[str]:
    """The points that dropped below ``ratio`` x the baseline's throughput (or whose p99
    rose above the baseline's / ``ratio``), each named; empty when none did.

    Raises InvalidArgumentError when the baseline is not an ``inferd perf`` JSON document or
    shares no load point with this run.
    """
    if baseline.get("format") != JSON_FORMAT or not isinstance(baseline.get("points"), list):
        raise InvalidArgumentError(
            "the baseline is not a JSON file written by 'inferd perf --json-output'"
        )
    known = {(b["mode"], float(b["level"])): b for b in baseline["points"]}
    failures: list[str] = []
    matched = 0
    for p in points:
        base = known.get((p.mode, float(p.level)))
        if base is None:
            continue
        matched += 1
        name = f"{p.mode} {p.level_label}"
        if p.throughput < ratio * float(base["throughput"]):
            failures.append(
                f"{name}: {p.throughput:.1f} infer/sec is below {ratio:g} x the baseline's "
                f"{float(base['throughput']):.1f}"
            )
        if check_p99:
            base_p99 = float(base["percentiles_us"]["99"])
            p99 = p.percentiles_us[99]
            if ratio > 0 and p99 > base_p99 / ratio:
                failures.append(
                    f"{name}: p99 {p99:.0f} usec is above the baseline's {base_p99:.0f} usec "
                    f"/ {ratio:g}"
                )
    if matched == 0:
        raise InvalidArgumentError(
            "the baseline shares no load point with this run: measure the same concurrencies "
            "or rates as the baseline"
        )
    return failures


# -- terminal -------------------------------------------------------------------------------


def _level_line(point: LoadPoint) -> str:
    if point.mode == "concurrency":
        return f"Request concurrency: {point.level_label}"
    if point.mode == "request-rate":
        return f"Request Rate: {point.level_label}"
    return "Request intervals from file"


def point_text(point: LoadPoint, *, in_process: bool = False) -> str:
    """One load point as perf_analyzer prints it, with cost and the verdict."""
    lines = [_level_line(point), "  Client: "]
    lines.append(f"    Request count: {point.request_count}")
    if point.error_count:
        lines.append(f"    Failed requests: {point.error_count}")
        lines += [f"      {e}" for e in point.errors]
    if point.mode != "concurrency":
        lines.append(f"    Avg send request rate: {point.send_rate:.2f} infer/sec")
        lines.append(
            f"    Sends late by more than the slip bound: {point.late_sends} of {point.sent} "
            f"({point.late_share:.2%}; worst {point.max_slip_us:.0f} usec); "
            f"most requests in flight: {point.max_in_flight}"
        )
    if point.sequence_count:
        rate = point.sequence_count / point.duration_s if point.duration_s else 0.0
        lines.append(f"    Sequence count: {point.sequence_count} ({rate:g} seq/sec)")
    lines.append(f"    Throughput: {point.throughput:g} infer/sec")
    if point.stabilising_percentile is None:
        lines.append(
            f"    Avg latency: {int(point.avg_latency_us)} usec "
            f"(standard deviation {int(point.std_latency_us)} usec)"
        )
    for p, value in sorted(point.percentiles_us.items()):
        lines.append(f"    p{p} latency: {int(value)} usec")
    if point.llm is not None:
        lines += llm_lines(point.llm)
    lines.append(f"    Client CPU: {point.client_cpu_share:.0%} of one core")
    s = point.server
    if s is not None:
        lines += [
            "  Server: ",
            f"    Inference count: {s.inference_count}",
            f"    Execution count: {s.execution_count}",
            f"    Successful request count: {s.request_count}",
            f"    Avg request latency: {int(s.request_us)} usec (overhead "
            f"{int(s.overhead_us)} usec + queue {int(s.queue_us)} usec + compute input "
            f"{int(s.compute_input_us)} usec + compute infer {int(s.compute_infer_us)} usec + "
            f"compute output {int(s.compute_output_us)} usec)",
        ]
    lines.append("  Cost: ")
    cpu = point.cost.get("server_cpu_s_per_1000")
    lines.append(
        "    Server CPU: "
        + (f"{cpu:.3f} CPU-seconds per 1000 inferences" if cpu is not None else "unknown")
    )
    rss = point.cost.get("server_rss_mb")
    if rss is not None:
        lines.append(f"    Server RSS: {rss:.1f} MiB")
    energy = point.cost.get("energy_j_per_1000")
    if energy is not None:
        lines.append(f"    Energy: {energy:.2f} J per 1000 inferences (whole machine)")
    gpu_energy = point.cost.get("gpu_energy_j_per_1000")
    if gpu_energy is not None:
        lines.append(f"    GPU energy: {gpu_energy:.2f} J per 1000 inferences")
    if point.server_metrics is not None:
        lines += metrics_lines(point.server_metrics)
    if not point.stable:
        lines.append(
            f"  [WARNING] unstable: the last windows of {point.windows} did not agree within "
            "the stability percentage; the figures merge the last three"
        )
    verdict = client_verdict(point, in_process=in_process)
    if verdict is not None:
        lines.append(f"  [VERDICT] {verdict}")
    return "\n".join(lines)


def _pcts(spread: Spread | None, unit: str, fmt: str = ".0f") -> str:
    if spread is None:
        return "n/a"
    shown = ", ".join(f"p{p} {v:{fmt}}" for p, v in spread.percentiles.items())
    return f"avg {spread.avg:{fmt}} {unit} ({shown})"


def llm_lines(llm: LlmFigures) -> list[str]:
    """The LLM figures of one point, for the terminal."""
    return [
        f"    Requests/second: {llm.requests_per_s:.2f}",
        f"    Output tokens/second: {llm.output_tokens_per_s:.1f} "
        f"(avg {llm.avg_output_tokens:.1f} output, {llm.avg_input_tokens:.1f} input tokens "
        "per request)",
        f"    Time to first token: {_pcts(llm.ttft_us, 'usec')}",
        f"    Inter-token latency: {_pcts(llm.itl_us, 'usec')}",
        f"    Output tokens/second per request: {_pcts(llm.tokens_per_s_per_request, '', '.1f')}",
    ]


def summary_text(points: Sequence[LoadPoint]) -> str:
    """perf_analyzer's closing lines: one per load point."""
    lines = ["Inferences/Second vs. Client Average Batch Latency"]
    for p in points:
        first = (
            f"Concurrency: {p.level_label}"
            if p.mode == "concurrency"
            else (f"Request Rate: {p.level_label}" if p.mode == "request-rate" else "Intervals")
        )
        lines.append(
            f"{first}, throughput: {p.throughput:g} infer/sec, latency {int(p.avg_latency_us)} usec"
            + (_llm_summary(p.llm) if p.llm is not None else "")
        )
    return "\n".join(lines)


def _llm_summary(llm: LlmFigures) -> str:
    ttft = "n/a" if llm.ttft_us is None else f"{int(llm.ttft_us.percentiles[50])} usec"
    itl = "n/a" if llm.itl_us is None else f"{int(llm.itl_us.percentiles[50])} usec"
    return f", TTFT p50 {ttft}, ITL p50 {itl}, {llm.output_tokens_per_s:.1f} output tokens/sec"
