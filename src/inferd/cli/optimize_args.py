"""``inferd optimize``'s flags, and their reading into typed options."""

from __future__ import annotations

import argparse
from pathlib import Path

from inferd.cli.common_args import results_group
from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.decide import OBJECTIVES, Goals
from inferd.tools.optimize.device import parse_device
from inferd.tools.optimize.metrics import METRICS, parse_budget
from inferd.tools.optimize.plan import KINDS
from inferd.tools.optimize.run import OptimizeOptions
from inferd.tools.optimize.speed import SpeedSettings

DEFAULT_RESULTS = Path("optimize-results")


def _positive_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated whole numbers") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be at least 1")
    return values


def _kinds(text: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if values == ("none",):
        return values
    unknown = [v for v in values if v not in KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown candidate kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}"
        )
    return values


def _device(text: str) -> str:
    try:
        return parse_device(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_optimize_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="the model to optimize (its latest version)")
    p.add_argument(
        "--model-repository", type=Path, required=True, metavar="DIR", help="the repository"
    )
    data = p.add_argument_group("data")
    data.add_argument(
        "--calibration",
        type=Path,
        required=True,
        metavar="DATA",
        help="rows that look like production inputs, for calibrating INT8 and for the "
        "sensitivity of each node: .npz (an array per input), .parquet (a column per input) "
        "or a folder of v2 JSON inference requests",
    )
    data.add_argument(
        "--eval",
        dest="eval_data",
        type=Path,
        required=True,
        metavar="DATA",
        help="rows every candidate is checked on (same formats); with labels (--label), task "
        "metrics are computed too",
    )
    data.add_argument(
        "--train",
        type=Path,
        metavar="DATA",
        help="labelled rows for a short fine-tuning pass after pruning (optional)",
    )
    data.add_argument(
        "--label",
        metavar="NAME",
        help="the array/column of the data holding labels (default: 'label' or 'labels', "
        "if present)",
    )
    data.add_argument(
        "--output", metavar="NAME", help="the output compared (default: the first float output)"
    )
    goals = p.add_argument_group("what makes a candidate win")
    goals.add_argument(
        "--metric",
        choices=METRICS,
        help="the figure the accuracy budget applies to (default: accuracy with labels for a "
        "classifier, rmse for regression, else cosine similarity to the baseline's outputs)",
    )
    goals.add_argument(
        "--accuracy-budget",
        default="1%",
        metavar="PCT",
        help="how much worse than the baseline the metric may get: points for metrics in 0..1, "
        "relative for errors (default: 1%%)",
    )
    goals.add_argument(
        "--latency-budget-ms",
        type=float,
        metavar="MS",
        help="p99 latency limit at the objective's batch size",
    )
    goals.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="throughput",
        help="throughput (at the largest batch size measured, or --batch-size), latency (p50 "
        "at the smallest) or size on disk (default: throughput)",
    )
    goals.add_argument(
        "--batch-size",
        type=int,
        metavar="B",
        help="the batch size the objective is read at (one of --batch-sizes)",
    )
    goals.add_argument(
        "--min-gain",
        default="5%",
        metavar="PCT",
        help="how much better than the baseline the winner must be to replace it (default: 5%%)",
    )
    cands = p.add_argument_group("candidates")
    cands.add_argument(
        "--only",
        type=_kinds,
        default=(),
        metavar="KINDS",
        help=f"build only these kinds (comma-separated): {', '.join(KINDS)}; 'none' builds "
        "none (only --candidate models are judged)",
    )
    cands.add_argument(
        "--candidate",
        dest="extra",
        type=Path,
        action="append",
        default=[],
        metavar="ONNX",
        help="a model made elsewhere (e.g. by inferd distill) to judge beside the others",
    )
    cands.add_argument(
        "--calibration-rows",
        type=int,
        default=256,
        metavar="N",
        help="rows of --calibration used (default: 256)",
    )
    speed = p.add_argument_group("speed measurement (in process)")
    speed.add_argument(
        "--device",
        type=_device,
        default="auto",
        metavar="DEVICE",
        help="where the baseline and every candidate are served and measured: cpu, cuda, "
        "cuda:N, or auto (default): a GPU when the model's instance_group asks for KIND_GPU, "
        "else the host. A GPU that cannot be used (torch without CUDA, ONNX Runtime without "
        "its CUDA provider) is refused, never replaced by the host; on a GPU, FP16 candidates "
        "(torch-fp16, ONNX fp16 on the CUDA provider) are built and OpenVINO's are skipped",
    )
    speed.add_argument(
        "--batch-sizes",
        type=_positive_ints,
        default=(1, 8, 64),
        metavar="LIST",
        help="batch sizes measured, capped at the model's max_batch_size (default: 1,8,64)",
    )
    speed.add_argument(
        "--measurement-interval",
        type=int,
        default=1000,
        metavar="MS",
        help="measurement window per batch size (default: 1000)",
    )
    speed.add_argument(
        "--max-trials",
        type=int,
        default=6,
        metavar="N",
        help="windows before giving up on stability",
    )
    results_help = f"candidates, report.html, report.json (default: ./{DEFAULT_RESULTS})"
    with results_group(p, default=DEFAULT_RESULTS, help=results_help) as out:
        out.add_argument(
            "--dry-run",
            action="store_true",
            help="measure and report, but leave the repository as it is",
        )
        out.add_argument(
            "--output-model",
            metavar="NAME",
            help="write the winner as this new model instead of a new version of MODEL (a "
            "winner on another runtime always becomes a new model, by default MODEL_optimized)",
        )


def _share(text: str, flag: str) -> float:
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise InvalidArgumentError(f"{flag} {text!r}: give a share such as 5% or 0.05") from None
    if value < 0:
        raise InvalidArgumentError(f"{flag} {text!r}: must not be negative")
    return value


def options_from_args(args: argparse.Namespace) -> OptimizeOptions:
    if args.batch_size is not None and args.batch_size not in args.batch_sizes:
        raise InvalidArgumentError(
            f"--batch-size {args.batch_size} is not among --batch-sizes "
            f"{','.join(map(str, args.batch_sizes))}"
        )
    if args.measurement_interval < 100:
        raise InvalidArgumentError("--measurement-interval must be at least 100 ms")
    if args.max_trials < 3:
        raise InvalidArgumentError("--max-trials must be at least 3 (stability needs 3 windows)")
    if args.calibration_rows < 1:
        raise InvalidArgumentError("--calibration-rows must be at least 1")
    if args.latency_budget_ms is not None and args.latency_budget_ms <= 0:
        raise InvalidArgumentError("--latency-budget-ms must be above 0")
    for path in (args.model_repository, args.calibration, args.eval_data, args.train, *args.extra):
        if path is not None and not path.exists():
            raise InvalidArgumentError(f"{path} does not exist")
    goals = Goals(
        objective=args.objective,
        budget=parse_budget(args.accuracy_budget),
        latency_budget_ms=args.latency_budget_ms,
        batch_size=args.batch_size,
        min_gain=_share(args.min_gain, "--min-gain"),
    )
    return OptimizeOptions(
        model=args.model,
        repository=args.model_repository,
        calibration=args.calibration,
        eval_data=args.eval_data,
        results=args.results,
        train=args.train,
        metric=args.metric,
        label=args.label,
        output=args.output,
        goals=goals,
        speed=SpeedSettings(
            batch_sizes=args.batch_sizes,
            measurement_interval_ms=args.measurement_interval,
            max_trials=args.max_trials,
        ),
        only=args.only,
        extra=tuple(args.extra),
        write=not args.dry_run,
        output_model=args.output_model,
        calibration_rows=args.calibration_rows,
        device=args.device,
    )
