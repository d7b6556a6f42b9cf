"""An ``autoscaling/v2`` HorizontalPodAutoscaler manifest, read into the simulation's terms.

The metrics the simulation can produce are inferd's own: a Pods metric whose name says
``pending`` (``nv_inference_pending_request_count`` per pod, however the metrics adapter names
it), a Pods metric whose name says ``queue`` with its unit (``_us``, ``_ms`` or ``_seconds``;
the average queue time per request), and the CPU Resource metric as an average utilisation.
Anything else is refused by name. Missing ``behavior`` fields take the API's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferd.errors import InvalidArgumentError
from inferd.tools.scaling.hpa import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    Behavior,
    MetricTarget,
    ScalingPolicy,
    ScalingRules,
)

__all__ = ["ManifestHpa", "parse_quantity", "read_hpa_manifest", "rules_from"]

_SUFFIXES = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 1024.0, "Mi": 1024.0**2}


@dataclass(frozen=True)
class ManifestHpa:
    name: str
    min_replicas: int
    max_replicas: int
    metrics: tuple[MetricTarget, ...]
    behavior: Behavior


def parse_quantity(text: Any, what: str) -> float:
    """A Kubernetes quantity (``4``, ``500m``, ``1.5``, ``2k``) as a number."""
    raw = str(text).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if raw.endswith(suffix):
            number, scale = raw[: -len(suffix)], _SUFFIXES[suffix]
            break
    else:
        number, scale = raw, 1.0
    try:
        return float(number) * scale
    except ValueError as exc:
        raise InvalidArgumentError(f"{what}: {raw!r} is not a Kubernetes quantity") from exc


def _queue_scale(name: str) -> float | None:
    lowered = name.lower()
    for suffixes, scale in (
        (("_us", "microseconds"), 1.0),
        (("_ms", "milliseconds"), 1e3),
        (("_seconds", "_s"), 1e6),
    ):
        if lowered.endswith(suffixes):
            return scale
    return None


def _metric(entry: Mapping[str, Any]) -> MetricTarget:
    kind = entry.get("type")
    if kind == "Resource":
        resource = entry.get("resource") or {}
        target = resource.get("target") or {}
        if resource.get("name") != "cpu" or target.get("type") != "Utilization":
            raise InvalidArgumentError(
                f"the HPA's {resource.get('name')!r} {target.get('type')!r} metric cannot be "
                "simulated: of Resource metrics only cpu with type Utilization is"
            )
        return MetricTarget("cpu", float(target.get("averageUtilization", 0)), True)
    if kind == "Pods":
        pods = entry.get("pods") or {}
        name = str((pods.get("metric") or {}).get("name", ""))
        target = pods.get("target") or {}
        if target.get("type") != "AverageValue":
            raise InvalidArgumentError(f"the Pods metric {name!r} needs an AverageValue target")
        value = parse_quantity(target.get("averageValue"), f"the target of {name}")
        if "pending" in name.lower():
            return MetricTarget("pending", value)
        scale = _queue_scale(name) if "queue" in name.lower() else None
        if scale is not None:
            return MetricTarget("queue-us", value * scale)
        raise InvalidArgumentError(
            f"the Pods metric {name!r} cannot be simulated: name pending requests (a name with "
            "'pending') or queue time (a name with 'queue' ending in _us, _ms or _seconds)"
        )
    raise InvalidArgumentError(
        f"the HPA's {kind} metric cannot be simulated: use Pods or Resource (cpu) metrics"
    )


def _policy(raw: Mapping[str, Any]) -> ScalingPolicy:
    try:
        return ScalingPolicy(str(raw["type"]), int(raw["value"]), int(raw["periodSeconds"]))
    except KeyError as exc:
        raise InvalidArgumentError(f"a scaling policy lacks {exc.args[0]}") from exc


def rules_from(raw: Mapping[str, Any] | None, default: ScalingRules) -> ScalingRules:
    """``behavior.scaleUp`` / ``scaleDown`` with the API's defaults for missing fields."""
    if not raw:
        return default
    policies = raw.get("policies")
    tolerance = raw.get("tolerance")
    return ScalingRules(
        stabilization_window_s=int(
            raw.get("stabilizationWindowSeconds", default.stabilization_window_s)
        ),
        policies=tuple(_policy(p) for p in policies) if policies else default.policies,
        select_policy=str(raw.get("selectPolicy", default.select_policy)),
        tolerance=parse_quantity(tolerance, "tolerance") if tolerance is not None else None,
    )


def hpa_from_document(doc: Mapping[str, Any], source: str) -> ManifestHpa:
    spec = doc.get("spec") or {}
    metrics = spec.get("metrics") or []
    if not metrics:
        raise InvalidArgumentError(f"{source}: the HPA has no metrics")
    behavior = spec.get("behavior") or {}
    try:
        return ManifestHpa(
            name=str((doc.get("metadata") or {}).get("name", "")),
            min_replicas=int(spec.get("minReplicas", 1)),
            max_replicas=int(spec["maxReplicas"]),
            metrics=tuple(_metric(m) for m in metrics),
            behavior=Behavior(
                rules_from(behavior.get("scaleUp"), DEFAULT_SCALE_UP),
                rules_from(behavior.get("scaleDown"), DEFAULT_SCALE_DOWN),
            ),
        )
    except KeyError as exc:
        raise InvalidArgumentError(f"{source}: the HPA lacks spec.{exc.args[0]}") from exc
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{source}: {exc}") from exc


def read_hpa_manifest(path: Path) -> ManifestHpa:
    """The first HorizontalPodAutoscaler (apiVersion autoscaling/v2) in a YAML file."""
    import yaml

    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise InvalidArgumentError(f"{path}: cannot read the HPA ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise InvalidArgumentError(f"{path}: not valid YAML ({exc})") from exc
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "HorizontalPodAutoscaler":
            if doc.get("apiVersion") != "autoscaling/v2":
                raise InvalidArgumentError(
                    f"{path}: the HPA is {doc.get('apiVersion')}; write it as autoscaling/v2"
                )
            return hpa_from_document(doc, str(path))
    raise InvalidArgumentError(f"{path}: no HorizontalPodAutoscaler in the file")
