"""The shipped Prometheus alert rules parse and name only metrics the server exports."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, generate_latest

from inferd.core.drift import FeatureDrift, MonitorStatistics, VersionDrift
from inferd.metrics.drift import DriftCollector

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "drift-alerts.yml"


def _exported() -> set[str]:
    features = tuple(
        FeatureDrift("f", "t", "input", kind, psi=0.1, ks_pvalue=0.5, mmd=0.1)
        for kind in ("numeric", "categorical", "multivariate")
    )
    stats = MonitorStatistics(0, 0, 0, (VersionDrift("m", 1, 10, features=features),))
    registry = CollectorRegistry()
    registry.register(DriftCollector(lambda: stats))
    text = generate_latest(registry).decode()
    return set(re.findall(r"^(inferd_\w+?)(?:\{| )", text, flags=re.MULTILINE))


def test_rules_name_exported_metrics() -> None:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    rules = [rule for group in document["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} >= {"InferdFeatureDrift", "InferdInputNaN"}
    exported = _exported()
    for rule in rules:
        assert set(rule) >= {"alert", "expr", "labels", "annotations"}
        for name in re.findall(r"inferd_\w+", rule["expr"]):
            assert name in exported, f"{rule['alert']} uses {name}, which is not exported"
