"""``inferd plan``: simulate Kubernetes' HorizontalPodAutoscaler over inferd replicas, from one
replica's measured capacity curve and a traffic trace; with ``--models``, size pods for
on-demand loading of a catalogue of models (:mod:`inferd.cli.plan_models`)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.cli.extras import missing_extra
from inferd.errors import InferdError, InvalidArgumentError

if TYPE_CHECKING:
    from inferd.tools.scaling.hpa import ScalingRules


def add_plan_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from inferd.cli.plan_args import DESCRIPTION, EPILOG, add_plan_arguments
    from inferd.cli.plan_models import add_models_arguments

    p = sub.add_parser(
        "plan",
        help="simulate HPA autoscaling of inferd replicas over a traffic trace, or size pods "
        "for a catalogue of models loaded on demand (--models)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_plan_arguments(p)
    add_models_arguments(p)
    defaults = vars(p.parse_args([]))  # --models refuses every other flag given

    def run(args: argparse.Namespace) -> int:
        return run_plan_command(args, defaults)

    p.set_defaults(func=run)


def run_plan_command(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> int:
    try:
        if args.models is not None or args.model_size is not None or args.model_sizes:
            from inferd.cli.plan_models import run_models_plan

            return run_models_plan(args, defaults or {})
        if args.capacity is None or args.traffic is None:
            raise InvalidArgumentError(
                "--capacity and --traffic are required (or --models to size pods for "
                "on-demand loading)"
            )
        return _run(args)
    except InferdError as exc:
        print(f"inferd plan: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from inferd.cli.plan_args import MAX_DURATION_S, hpa_spec, seconds
    from inferd.tools.scaling.capacity import load_curve
    from inferd.tools.scaling.replica import ReplicaModel
    from inferd.tools.scaling.report import ReportOptions, csv_text, json_text, summary_text
    from inferd.tools.scaling.simulate import MetricsPipeline, PodTiming, SimulationConfig
    from inferd.tools.scaling.sweep import run_plan
    from inferd.tools.scaling.traffic import parse_traffic, rates

    if args.plot is not None and (missing := missing_extra("plan", ("plotly",))):
        raise InvalidArgumentError(f"--plot {missing}")
    spec, mins = hpa_spec(args)
    curve = load_curve(args.capacity, batch_size=args.batch_size)
    traffic = parse_traffic(args.traffic)
    duration = seconds(args.duration, "--duration") if args.duration else traffic.natural_duration_s
    if not 1 <= duration <= MAX_DURATION_S:
        raise InvalidArgumentError("--duration must be between 1 s and 31 days")
    peak_cpu = curve.cpu_cores_at(curve.max_rps)
    cpu_request = args.cpu_request if args.cpu_request is not None else (peak_cpu or 1.0)
    replica = ReplicaModel(curve, cpu_request, seconds(args.request_timeout, "--request-timeout"))
    timing = PodTiming(
        start_s=seconds(args.pod_start, "--pod-start"),
        warm_up_s=seconds(args.warm_up, "--warm-up"),
        stop_s=seconds(args.stop_time, "--stop-time"),
        warm_up_cpu=args.warm_up_cpu,
    )
    pipeline = MetricsPipeline(
        sync_period_s=int(seconds(args.sync_period, "--sync-period", whole=True)),
        scrape_interval_s=int(seconds(args.scrape_interval, "--scrape-interval", whole=True)),
        window_s=int(seconds(args.metric_window, "--metric-window", whole=True)),
    )
    report_interval = int(seconds(args.report_interval, "--report-interval", whole=True))
    if args.initial_replicas is not None and args.initial_replicas < 1:
        raise InvalidArgumentError("--initial-replicas must be at least 1")
    config = SimulationConfig(
        hpa=spec,
        replica=replica,
        timing=timing,
        pipeline=pipeline,
        initial_replicas=args.initial_replicas,
        report_interval_s=report_interval,
    )
    offered = rates(traffic, math.ceil(duration))
    plan = run_plan(config, offered, mins, fixed_fleet=not args.no_fixed_fleet)
    if args.pod_hour_cost is not None and args.pod_hour_cost < 0:
        raise InvalidArgumentError("--pod-hour-cost cannot be negative")
    options = ReportOptions(
        slo_p99_us=seconds(args.slo_p99, "--slo-p99") * 1e6 if args.slo_p99 else None,
        pod_hour_cost=args.pod_hour_cost,
    )
    settings = {
        "capacity": str(args.capacity),
        "traffic": args.traffic,
        "max_replicas": spec.max_replicas,
        "metrics": {m.name: m.target for m in spec.metrics},
        "tolerance": spec.controller.tolerance,
        "scale_up": _rules_dict(spec.behavior.scale_up),
        "scale_down": _rules_dict(spec.behavior.scale_down),
        "pod_start_s": timing.start_s,
        "warm_up_s": timing.warm_up_s,
        "stop_s": timing.stop_s,
        "cpu_request_cores": cpu_request,
        "request_timeout_s": replica.request_timeout_s,
        "sync_period_s": pipeline.sync_period_s,
        "scrape_interval_s": pipeline.scrape_interval_s,
        "window_s": pipeline.window_s,
    }
    text = summary_text(plan, curve, settings, options, report_interval)
    print(text)
    if args.json is not None:
        _write(args.json, json_text(plan, settings, options))
    if args.csv is not None:
        _write(args.csv, csv_text(plan))
    if args.plot is not None:
        from inferd.tools.scaling.plot import plan_html

        _write(args.plot, plan_html(plan, f"inferd plan: {args.traffic}", text))
    return 0


def _rules_dict(rules: ScalingRules) -> dict[str, Any]:
    return {
        "stabilization_window_s": rules.stabilization_window_s,
        "policies": [f"{p.type}:{p.value}:{p.period_s}s" for p in rules.policies],
        "select_policy": rules.select_policy,
        "tolerance": rules.tolerance,
    }


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InvalidArgumentError(f"{path}: cannot write ({exc.strerror})") from exc
    print(f"wrote {path}")
