"""``inferd plan``'s flags, and turning them into the simulation's settings."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from inferd.cli.extras import missing_extra
from inferd.errors import InvalidArgumentError
from inferd.tools.scaling.hpa import (
    DEFAULT_BEHAVIOR,
    Behavior,
    ControllerSettings,
    HpaSpec,
    MetricTarget,
    ScalingPolicy,
    ScalingRules,
)
from inferd.tools.scaling.hpa_manifest import read_hpa_manifest

MAX_DURATION_S = 31 * 86400

DESCRIPTION = """\
Simulate how a Deployment of inferd replicas behind a Kubernetes HorizontalPodAutoscaler
(autoscaling/v2) follows a traffic trace, one second at a time: the HPA's rule as the
controller applies it (10% tolerance, stabilization windows, Pods/Percent policies, minReplicas
and maxReplicas, not-ready pods and missing metrics set aside), pods that take time to start
and warm up before they take traffic, and each ready replica as a queue in front of the
capacity curve 'inferd perf' measured. Prints, per minReplicas asked for and for a fixed fleet
sized for the peak: pod-hours, replicas, requests failed and queued (while scaling, too), and
latency percentiles; writes the time series as JSON or CSV and a plot as HTML.

The HPA can scale on inferd's own metrics: pending (nv_inference_pending_request_count per
pod), queue (average queue time per request) and cpu (utilisation of the pod's CPU request).
See docs/capacity-planning.md.

With --models, it sizes pods for on-demand loading instead: given a catalogue of models, their
sizes, a Zipf popularity law and each pod's memory budget, the hit ratio (the share of requests
that find their model loaded; LRU by Che's approximation) for each number of pods, and the
pods needed. See docs/multi-model.md."""

EPILOG = """\
traffic specs (components add up; times take s, m, h or d):
  daily:low=20,high=300[,period=24h,peak=14h]   constant:rate=100
  step:from=100,to=250,at=2h                   ramp:from=0,to=400,start=1h,end=3h
  spike:height=500,at=13h,duration=10m[,rise=1m]
  csv:FILE (rows of time_seconds,requests_per_second)

example:
  inferd perf -m digits --concurrency-range 1:16 --json-output digits.json
  inferd plan --capacity digits.json --traffic "daily:low=200,high=3000 + \\
      spike:height=2000,at=13h,duration=10m,rise=1m" --metric pending=2 --metric cpu=70 \\
      --min-replicas 1,2,3 --max-replicas 20 --plot plan.html
  inferd plan --models 2000 --model-size 300MiB --zipf 0.9 --pod-budget 24GiB \\
      --baseline 200MiB --target-hit-ratio 0.95 --rate 500 --load-time 1.5s"""

_METRIC_NAMES = {"pending": "pending", "queue": "queue-us", "cpu": "cpu"}


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    inputs = p.add_argument_group("inputs")
    inputs.add_argument(
        "--capacity",
        type=Path,
        metavar="FILE",
        help="one replica's capacity curve (required without --models): 'inferd perf "
        "--json-output' (best: it has the server's queue time and CPU) or a "
        "perf_analyzer-style CSV ('inferd perf -f')",
    )
    inputs.add_argument(
        "--batch-size",
        type=int,
        default=1,
        metavar="N",
        help="the batch size of a CSV curve's requests (a JSON curve records its own)",
    )
    inputs.add_argument(
        "--traffic",
        metavar="SPEC",
        help="requests per second over time (below; required without --models)",
    )
    inputs.add_argument(
        "--duration", metavar="TIME", help="how long to simulate (default: the trace's length)"
    )

    hpa = p.add_argument_group("the HorizontalPodAutoscaler")
    hpa.add_argument(
        "--hpa",
        type=Path,
        metavar="FILE",
        help="an autoscaling/v2 HPA manifest (YAML) to take min/max, metrics and behavior "
        "from; the flags below override it",
    )
    hpa.add_argument(
        "--min-replicas",
        metavar="N[,N...]",
        help="minReplicas; several values run one simulation each (the warm spares kept)",
    )
    hpa.add_argument("--max-replicas", type=int, metavar="N", help="maxReplicas (default 10)")
    hpa.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME=TARGET",
        help="a metric and its target per pod: pending=N (requests waiting), queue=TIME "
        "(average queue time, e.g. 5ms), cpu=PERCENT (of the CPU request); repeatable, the "
        "largest proposal wins",
    )
    hpa.add_argument(
        "--tolerance",
        type=float,
        default=0.1,
        help="the controller's tolerance around a ratio of 1 (default 0.1)",
    )
    hpa.add_argument("--sync-period", default="15s", metavar="TIME", help="default 15s")
    for direction, window in (("up", "0s"), ("down", "300s")):
        hpa.add_argument(
            f"--scale-{direction}-window",
            metavar="TIME",
            help=f"behavior.scale{direction.title()}.stabilizationWindowSeconds (default {window})",
        )
        hpa.add_argument(
            f"--scale-{direction}-policy",
            action="append",
            default=[],
            metavar="TYPE:VALUE:PERIOD",
            help=f"a scale-{direction} policy, e.g. Pods:4:15s or Percent:100:15s; repeatable "
            "(replaces the default policies)",
        )
        hpa.add_argument(
            f"--scale-{direction}-select",
            choices=("Max", "Min", "Disabled"),
            help="selectPolicy (default Max)",
        )
    hpa.add_argument(
        "--cpu-initialization-period",
        default="5m",
        metavar="TIME",
        help="CPU samples of a pod started this recently count only once taken after it was "
        "ready (default 5m)",
    )
    hpa.add_argument(
        "--initial-readiness-delay",
        default="30s",
        metavar="TIME",
        help="a pod unready this soon after starting has never been ready (default 30s)",
    )

    pods = p.add_argument_group("pods and metrics")
    pods.add_argument(
        "--pod-start",
        default="30s",
        metavar="TIME",
        help="created → running: scheduling, image pull, init containers (default 30s)",
    )
    pods.add_argument(
        "--warm-up",
        default="15s",
        metavar="TIME",
        help="running → ready: loading and warming the models (default 15s)",
    )
    pods.add_argument(
        "--stop-time",
        default="10s",
        metavar="TIME",
        help="a deleted pod's billed time after it stops taking traffic (default 10s, preStop)",
    )
    pods.add_argument(
        "--cpu-request",
        type=float,
        metavar="CORES",
        help="the pod's CPU request (default: the curve's CPU use at its peak)",
    )
    pods.add_argument(
        "--warm-up-cpu",
        type=float,
        default=1.0,
        metavar="SHARE",
        help="share of the CPU request used while models load (default 1.0)",
    )
    pods.add_argument(
        "--request-timeout",
        default="1s",
        metavar="TIME",
        help="a request that would wait longer than this in a full replica's queue fails "
        "(default 1s)",
    )
    pods.add_argument(
        "--initial-replicas",
        type=int,
        metavar="N",
        help="ready pods at the start (default: what the targets need for the first second)",
    )
    pods.add_argument(
        "--scrape-interval",
        default="15s",
        metavar="TIME",
        help="how often the pods' metrics are scraped (default 15s)",
    )
    pods.add_argument(
        "--metric-window",
        default="1m",
        metavar="TIME",
        help="each sample is the pod's average over this window (default 1m, as the "
        "prometheus-adapter rules in deploy/kubernetes average the pending count)",
    )

    out = p.add_argument_group("report")
    out.add_argument("--report-interval", default="1m", metavar="TIME", help="default 1m")
    out.add_argument(
        "--slo-p99", metavar="TIME", help="a latency objective: report the share slower or failed"
    )
    out.add_argument("--pod-hour-cost", type=float, metavar="PRICE", help="price of a pod-hour")
    out.add_argument(
        "--no-fixed-fleet",
        action="store_true",
        help="leave out the fixed fleet sized for the peak at the target",
    )
    out.add_argument("--json", type=Path, metavar="FILE", help="the plan and time series")
    out.add_argument("--csv", type=Path, metavar="FILE", help="the time series")
    out.add_argument("--plot", type=Path, metavar="FILE.html", help="load, replicas and p99")


def seconds(text: str, flag: str, *, whole: bool = False) -> float:
    from inferd.tools.scaling.traffic import parse_duration  # numpy: only once a plan runs

    value = parse_duration(text, flag)
    if whole and value != int(value):
        raise InvalidArgumentError(f"{flag} is a whole number of seconds")
    return value


def _metric(text: str) -> MetricTarget:
    name, sep, value = text.partition("=")
    kind = _METRIC_NAMES.get(name.strip())
    if not sep or kind is None:
        raise InvalidArgumentError(
            f"--metric {text!r}: write pending=N, queue=TIME (e.g. 5ms) or cpu=PERCENT"
        )
    if kind == "queue-us":
        return MetricTarget(kind, seconds(value, "--metric queue") * 1e6)
    try:
        number = float(value.strip().rstrip("%"))
    except ValueError as exc:
        raise InvalidArgumentError(f"--metric {text!r}: {value!r} is not a number") from exc
    return MetricTarget(kind, number, cpu_utilization=kind == "cpu")


def _policy(text: str, flag: str) -> ScalingPolicy:
    parts = text.split(":")
    if len(parts) != 3:
        raise InvalidArgumentError(f"{flag} {text!r}: write TYPE:VALUE:PERIOD, e.g. Pods:4:15s")
    try:
        value = int(parts[1])
    except ValueError as exc:
        raise InvalidArgumentError(f"{flag} {text!r}: the value is a whole number") from exc
    return ScalingPolicy(parts[0], value, int(seconds(parts[2], flag, whole=True)))


def _rules(args: argparse.Namespace, direction: str, base: ScalingRules) -> ScalingRules:
    window = getattr(args, f"scale_{direction}_window")
    policies = getattr(args, f"scale_{direction}_policy")
    select = getattr(args, f"scale_{direction}_select")
    flag = f"--scale-{direction}-policy"
    return replace(
        base,
        stabilization_window_s=(
            int(seconds(window, f"--scale-{direction}-window", whole=True))
            if window is not None
            else base.stabilization_window_s
        ),
        policies=tuple(_policy(p, flag) for p in policies) if policies else base.policies,
        select_policy=select or base.select_policy,
    )


def hpa_spec(args: argparse.Namespace) -> tuple[HpaSpec, list[int]]:
    base_min, base_max, behavior = 1, 10, DEFAULT_BEHAVIOR
    metrics: tuple[MetricTarget, ...] = ()
    if args.hpa is not None:
        if missing := missing_extra("plan", ("yaml",)):
            raise InvalidArgumentError(f"--hpa {missing}")
        manifest = read_hpa_manifest(args.hpa)
        base_min, base_max = manifest.min_replicas, manifest.max_replicas
        metrics, behavior = manifest.metrics, manifest.behavior
    if args.metric:
        metrics = tuple(_metric(m) for m in args.metric)
    if not metrics:
        raise InvalidArgumentError(
            "name what the HPA scales on: --metric pending=4 (or queue=5ms, cpu=70), or --hpa FILE"
        )
    names = [m.name for m in metrics]
    if len(set(names)) != len(names):
        raise InvalidArgumentError("each metric can be given once")
    mins = [base_min]
    if args.min_replicas is not None:
        try:
            mins = [int(v) for v in args.min_replicas.split(",") if v.strip()]
        except ValueError as exc:
            raise InvalidArgumentError("--min-replicas takes whole numbers, e.g. 1,2,3") from exc
        if not mins:
            raise InvalidArgumentError("--min-replicas takes whole numbers, e.g. 1,2,3")
    if args.tolerance < 0:
        raise InvalidArgumentError("--tolerance cannot be negative")
    spec = HpaSpec(
        min_replicas=min(mins),
        max_replicas=args.max_replicas if args.max_replicas is not None else base_max,
        metrics=metrics,
        behavior=Behavior(
            _rules(args, "up", behavior.scale_up), _rules(args, "down", behavior.scale_down)
        ),
        controller=ControllerSettings(
            tolerance=args.tolerance,
            cpu_initialization_period_s=seconds(
                args.cpu_initialization_period, "--cpu-initialization-period"
            ),
            initial_readiness_delay_s=seconds(
                args.initial_readiness_delay, "--initial-readiness-delay"
            ),
        ),
    )
    return spec, mins
