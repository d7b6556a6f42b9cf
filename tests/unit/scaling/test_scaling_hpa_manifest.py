"""Reading an autoscaling/v2 HPA manifest into the simulation's terms."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.errors import InvalidArgumentError
from inferd.tools.scaling.hpa import DEFAULT_SCALE_DOWN, DEFAULT_SCALE_UP, ScalingPolicy
from inferd.tools.scaling.hpa_manifest import parse_quantity, read_hpa_manifest

HPA = """\
apiVersion: v1
kind: Service
metadata: {name: inferd}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: inferd
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: inferd}
  minReplicas: 2
  maxReplicas: 12
  metrics:
    - type: Pods
      pods:
        metric:
          name: inferd_pending_requests
        target:
          type: AverageValue
          averageValue: 1500m
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: 70
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 600
      policies:
        - {type: Pods, value: 1, periodSeconds: 60}
    scaleUp:
      selectPolicy: Min
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hpa.yaml"
    path.write_text(text)
    return path


def test_an_hpa_with_a_pods_metric_and_cpu(tmp_path: Path) -> None:
    hpa = read_hpa_manifest(write(tmp_path, HPA))
    assert (hpa.name, hpa.min_replicas, hpa.max_replicas) == ("inferd", 2, 12)
    assert [(m.name, m.target, m.cpu_utilization) for m in hpa.metrics] == [
        ("pending", 1.5, False),
        ("cpu", 70.0, True),
    ]
    down, up = hpa.behavior.scale_down, hpa.behavior.scale_up
    assert down.stabilization_window_s == 600
    assert down.policies == (ScalingPolicy("Pods", 1, 60),)
    assert down.select_policy == "Max"
    # fields left out take the API's defaults
    assert up.select_policy == "Min"
    assert up.policies == DEFAULT_SCALE_UP.policies
    assert up.stabilization_window_s == 0


def test_no_behavior_means_the_defaults(tmp_path: Path) -> None:
    text = HPA.split("  behavior:")[0]
    hpa = read_hpa_manifest(write(tmp_path, text))
    assert hpa.behavior.scale_down == DEFAULT_SCALE_DOWN


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("inferd_queue_duration_us", 500.0),
        ("queue_time_ms", 500_000.0),
        ("avg_queue_seconds", 500_000_000.0),
    ],
)
def test_a_queue_time_metric_in_its_unit(tmp_path: Path, name: str, target: float) -> None:
    text = HPA.replace("inferd_pending_requests", name).replace("1500m", "500")
    assert read_hpa_manifest(write(tmp_path, text)).metrics[0].target == target


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("inferd_pending_requests", "requests_per_second", "cannot be simulated"),
        ("name: cpu", "name: memory", "only cpu with type Utilization"),
        ("type: Pods\n", "type: External\n", "External metric cannot be simulated"),
        ("autoscaling/v2\n", "autoscaling/v1\n", "write it as autoscaling/v2"),
        ("kind: HorizontalPodAutoscaler", "kind: Deployment", "no HorizontalPodAutoscaler"),
        ("  maxReplicas: 12\n", "", "lacks spec.maxReplicas"),
        ("type: Pods, value: 1", "type: Nodes, value: 1", "Pods or Percent"),
    ],
)
def test_what_cannot_be_simulated_is_refused_by_name(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        read_hpa_manifest(write(tmp_path, HPA.replace(old, new, 1)))


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="not valid YAML"):
        read_hpa_manifest(write(tmp_path, "a: [b\n"))
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        read_hpa_manifest(tmp_path / "missing.yaml")


@pytest.mark.parametrize(("text", "value"), [("4", 4.0), ("500m", 0.5), ("2k", 2000.0), (3, 3.0)])
def test_quantities(text: object, value: float) -> None:
    assert parse_quantity(text, "x") == value


def test_the_projects_own_hpa_can_be_simulated() -> None:
    # the HPA deploy/kubernetes ships: inferd's pending requests (through prometheus-adapter),
    # CPU as the fallback, and its behaviour
    path = Path(__file__).resolve().parents[3] / "deploy/kubernetes/components/autoscaling/hpa.yaml"
    hpa = read_hpa_manifest(path)
    assert [m.name for m in hpa.metrics] == ["pending", "cpu"]
    assert hpa.min_replicas <= hpa.max_replicas
    assert hpa.behavior.scale_down.policies
