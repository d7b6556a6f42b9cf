"""The shipped Grafana dashboard and Prometheus rules as data, and the metric names they read
(PromQL is parsed only as far as naming metrics: identifiers of inferd's, Triton's and the
process collector's families, outside quoted strings)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "inferd-dashboard.json"
RULE_FILES = sorted((ROOT / "deploy" / "prometheus").glob("*.yml"))

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
# a metric of ours: no PromQL function starts like this, and a recorded name (with a colon)
# or a label value never matches
_NAME = re.compile(r"(?<![\w:])((?:nv|inferd|process)_[A-Za-z0-9_]*)(?![\w:])")
_SAMPLE = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    return set(_NAME.findall(_STRING.sub('""', expr)))


def exported_names(exposition: str) -> set[str]:
    """Every metric name a /metrics text can hold: its samples, and its families' declared
    names with the suffixes of their type (a family with no sample yet is still exported)."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.add(name)
            if kind.strip() == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            elif kind.strip() == "summary":
                names |= {f"{name}_sum", f"{name}_count"}
        elif line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            if match:
                names.add(match.group(0))
    return names


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def dashboard_queries() -> list[str]:
    """Every PromQL query of the dashboard: panels, annotations and template variables."""
    board = dashboard()
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    queries += [a["expr"] for a in board["annotations"]["list"] if "expr" in a]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            queries.append(query["query"])
    return queries


def rule_queries() -> dict[str, str]:
    """Every rule's expression, by ``file:alert-or-record``."""
    out: dict[str, str] = {}
    for path in RULE_FILES:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        for group in document["groups"]:
            for rule in group["rules"]:
                out[f"{path.name}:{rule.get('alert') or rule.get('record')}"] = rule["expr"]
    return out


def used_names() -> dict[str, set[str]]:
    """Metric name -> where it is used (dashboard, or rule file:rule)."""
    used: dict[str, set[str]] = {}
    for expr in dashboard_queries():
        for name in metric_names(expr):
            used.setdefault(name, set()).add("dashboard")
    for where, expr in rule_queries().items():
        for name in metric_names(expr):
            used.setdefault(name, set()).add(where)
    return used


#: the families only a server in on-demand mode exports (inferd.metrics.on_demand)
ON_DEMAND_FAMILIES = (
    "inferd_model_loads",
    "inferd_model_evictions",
    "inferd_model_eviction_thrash",
    "inferd_model_eviction_deferrals",
    "inferd_model_resident_bytes",
    "inferd_model_memory_budget_bytes",
    "inferd_model_memory_baseline_bytes",
    "inferd_model_load_duration_seconds",
)


def is_on_demand(name: str) -> bool:
    """True for a sample name of an on-demand family (``_total``, ``_bucket``... included)."""
    return any(
        name.startswith(family) and name.removeprefix(family) in _SUFFIXES
        for family in ON_DEMAND_FAMILIES
    )


_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")


def as_recording_rules(queries: list[str]) -> dict[str, Any]:
    """Dashboard queries as a Prometheus rule file (variables given values), for
    ``promtool check rules`` to parse."""
    values = {
        "$__rate_interval": "1m",
        "$__range": "1h",
        "$instance": ".*",
        "$model": ".*",
    }
    rules = []
    for i, query in enumerate(queries):
        # Grafana's label_values(SELECTOR, LABEL) reads the series of SELECTOR
        query = re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", query)
        for variable, value in values.items():
            query = query.replace(variable, value)
        rules.append({"record": f"dashboard:query_{i}", "expr": query})
    return {"groups": [{"name": "dashboard", "rules": rules}]}
