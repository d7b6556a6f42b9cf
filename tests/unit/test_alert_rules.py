"""The shipped Prometheus rule files: their structure always, and with promtool (when it is
installed: Debian's ``prometheus`` package) their syntax and each service alert's behaviour on
synthetic series, through promtool's rule unit tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULE_FILES = sorted(DEPLOY.glob("*.yml"))
SERVICE = DEPLOY / "service-alerts.yml"
SEVERITIES = {"critical", "warning", "info"}
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)"
)


def _rules(path: Path) -> list[dict[str, Any]]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def _alerts(path: Path) -> list[dict[str, Any]]:
    return [rule for rule in _rules(path) if "alert" in rule]


def test_the_rule_files_are_found() -> None:
    assert {p.name for p in RULE_FILES} >= {"drift-alerts.yml", "service-alerts.yml"}


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_every_alert_has_a_duration_a_severity_and_words(path: Path) -> None:
    names = [rule["alert"] for rule in _alerts(path)]
    assert names, f"{path.name} has no alert"
    assert len(names) == len(set(names)), f"{path.name} names an alert twice"
    for rule in _alerts(path):
        name = rule["alert"]
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, name
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), f"{name}: no for:"
        assert rule["labels"]["severity"] in SEVERITIES, name
        annotations = rule["annotations"]
        assert {"summary", "description"} <= set(annotations), name
        assert all(str(text).strip() for text in annotations.values()), name


def test_service_alerts_cover_what_an_operator_needs() -> None:
    names = {rule["alert"] for rule in _alerts(SERVICE)}
    assert names >= {
        "InferdDown",
        "InferdNotReady",
        "InferdModelLoadFailed",
        "InferdHighErrorRate",
        "InferdHighP99Latency",
        "InferdQueueTimeDominates",
        "InferdPayloadLogDropping",
        "InferdCanaryRolledBack",
        "InferdCPUSaturated",
    }
    for rule in _alerts(SERVICE):
        anchor = rule["alert"].lower()
        assert f"docs/dashboards.md#{anchor}" in rule["annotations"]["runbook"], rule["alert"]


def test_runbook_anchors_exist_in_the_docs() -> None:
    docs = (DEPLOY.parents[1] / "docs" / "dashboards.md").read_text(encoding="utf-8")
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in docs.splitlines()
        if line.startswith("#")
    }
    for rule in _alerts(SERVICE):
        assert rule["alert"].lower() in headings, f"docs/dashboards.md has no {rule['alert']}"


def test_recorded_thresholds_are_defined() -> None:
    recorded = {rule["record"] for rule in _rules(SERVICE) if "record" in rule}
    for rule in _alerts(SERVICE):
        for name in re.findall(r"\b[a-z_]+:[a-z0-9_:]+", rule["expr"]):
            assert name in recorded, f"{rule['alert']} reads {name}, which no rule records"


@needs_promtool
def test_promtool_accepts_every_rule_file() -> None:
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "check", "rules", *map(str, RULE_FILES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# -- promtool rule unit tests ------------------------------------------------------------------
# Each case feeds synthetic series (one sample a minute) and says which alerts fire at a given
# minute, with their labels and rendered summary. promtool compares annotations exactly, so the
# long description and runbook texts are left out of the copy of the rules the cases run on.

A = 'instance="a:8002", job="inferd"'


def _series(name: str, labels: str, values: str) -> dict[str, str]:
    return {"series": f"{name}{{{A}, {labels}}}" if labels else f"{name}{{{A}}}", "values": values}


def _expect(alert: str, minute: int, *fired: dict[str, str]) -> dict[str, Any]:
    return {
        "eval_time": f"{minute}m",
        "alertname": alert,
        "exp_alerts": [
            {
                "exp_labels": {k: v for k, v in labels.items() if k != "summary"},
                "exp_annotations": {"summary": labels["summary"]},
            }
            for labels in fired
        ],
    }


def _fired(severity: str, summary: str, **labels: str) -> dict[str, str]:
    return {"instance": "a:8002", "severity": severity, "summary": summary, **labels}


CASES: list[dict[str, Any]] = [
    {  # the scrape fails from minute 2: pending at 3, firing from 4
        "input_series": [_series("up", "", "1 1 0x10")],
        "alert_rule_test": [
            _expect("InferdDown", 3),
            _expect(
                "InferdDown",
                6,
                _fired("critical", "inferd at a:8002 cannot be scraped", job="inferd"),
            ),
        ],
    },
    {  # not ready from minute 1, for 5 minutes
        "input_series": [_series("inferd_server_ready", "", "1 0x10")],
        "alert_rule_test": [
            _expect("InferdNotReady", 4),
            _expect(
                "InferdNotReady",
                7,
                _fired("critical", "inferd at a:8002 is up but not ready", job="inferd"),
            ),
        ],
    },
    {  # new: its first failure at minute 20 creates the series; old: a second failure at
        # 20; calm: failed once, before the 15 minutes the rule looks back
        "input_series": [
            _series("inferd_model_load_failures_total", 'model="new"', "_x19 1x40"),
            _series("inferd_model_load_failures_total", 'model="old"', "1x19 2x40"),
            _series("inferd_model_load_failures_total", 'model="calm"', "1x60"),
        ],
        "alert_rule_test": [
            _expect("InferdModelLoadFailed", 17),
            _expect(
                "InferdModelLoadFailed",
                23,
                *(
                    _fired("warning", f"{m} on a:8002 failed to load", job="inferd", model=m)
                    for m in ("new", "old")
                ),
            ),
            _expect("InferdModelLoadFailed", 50),
        ],
    },
    {  # fraud: 10 failures for 100 successes a minute; simple: 1 for 1000
        "input_series": [
            _series("nv_inference_request_success", 'model="fraud", version="1"', "0+100x20"),
            _series(
                "nv_inference_request_failure",
                'model="fraud", version="1", reason="BACKEND"',
                "0+10x20",
            ),
            _series("nv_inference_request_success", 'model="simple", version="1"', "0+1000x20"),
            _series(
                "nv_inference_request_failure",
                'model="simple", version="1", reason="BACKEND"',
                "0+1x20",
            ),
        ],
        "alert_rule_test": [
            _expect(
                "InferdHighErrorRate",
                15,
                _fired("critical", "fraud on a:8002: 9.091% of requests fail", model="fraud"),
            )
        ],
    },
    {
        "input_series": [
            _series(
                "inferd_rejected_requests_total",
                'model="fraud", version="1", reason="queue_full"',
                "0+5x20",
            ),
            _series(
                "inferd_rejected_requests_total",
                'model="simple", version="1", reason="queue_full"',
                "3x20",
            ),
        ],
        "alert_rule_test": [
            _expect(
                "InferdRequestsRefused",
                12,
                _fired(
                    "warning",
                    "fraud on a:8002 refuses requests (queue_full)",
                    model="fraud",
                    reason="queue_full",
                ),
            )
        ],
    },
    {  # slow: every request between 250 and 500 ms; fast: under 1 ms
        "input_series": [
            _series("inferd_request_latency_us_bucket", f'model="{m}", le="{le}"', values)
            for m, le, values in [
                ("slow", "1000", "0x30"),
                ("slow", "250000", "0x30"),
                ("slow", "500000", "0+10x30"),
                ("slow", "+Inf", "0+10x30"),
                ("fast", "1000", "0+10x30"),
                ("fast", "250000", "0+10x30"),
                ("fast", "500000", "0+10x30"),
                ("fast", "+Inf", "0+10x30"),
            ]
        ],
        "alert_rule_test": [
            _expect("InferdHighP99Latency", 8),
            _expect(
                "InferdHighP99Latency",
                20,
                _fired(
                    "warning",
                    "slow on a:8002: p99 latency 497500 µs is over the threshold",
                    model="slow",
                ),
            ),
        ],
    },
    {  # busy queues 60% of each request's time, calm 20%
        "input_series": [
            _series("nv_inference_request_success", f'model="{m}"', "0+120x30")
            for m in ("busy", "calm")
        ]
        + [
            _series("nv_inference_request_duration_us", f'model="{m}"', "0+100000x30")
            for m in ("busy", "calm")
        ]
        + [
            _series("nv_inference_queue_duration_us", 'model="busy"', "0+60000x30"),
            _series("nv_inference_queue_duration_us", 'model="calm"', "0+20000x30"),
        ],
        "alert_rule_test": [
            _expect(
                "InferdQueueTimeDominates",
                20,
                _fired(
                    "warning",
                    "busy on a:8002: requests spend 60% of their time queued",
                    model="busy",
                ),
            )
        ],
    },
    {
        "input_series": [
            _series("inferd_payload_log_dropped_total", 'model="m", reason="queue_full"', "0+3x20"),
            _series("inferd_payload_log_dropped_total", 'model="m", reason="write_error"', "0x20"),
        ],
        "alert_rule_test": [
            _expect("InferdPayloadLogDropping", 5),
            _expect(
                "InferdPayloadLogDropping",
                15,
                _fired(
                    "warning",
                    "m on a:8002: the payload log drops requests (queue_full)",
                    model="m",
                    reason="queue_full",
                ),
            ),
        ],
    },
    {  # one rollback at minute 3: the alert holds while the 10-minute window sees it
        "input_series": [
            _series("inferd_rollout_canary_rollbacks_total", 'model="m"', "0 0 0 1x30")
        ],
        "alert_rule_test": [
            _expect("InferdCanaryRolledBack", 2),
            _expect(
                "InferdCanaryRolledBack",
                6,
                _fired(
                    "warning",
                    "the canary of m on a:8002 was rolled back",
                    job="inferd",
                    model="m",
                ),
            ),
            _expect("InferdCanaryRolledBack", 25),
        ],
    },
    {
        "input_series": [
            _series("nv_cpu_utilization", "", "0.95x40"),
            {"series": 'nv_cpu_utilization{instance="b:8002", job="inferd"}', "values": "0.5x40"},
        ],
        "alert_rule_test": [
            _expect("InferdCPUSaturated", 10),
            _expect(
                "InferdCPUSaturated",
                25,
                _fired(
                    "warning",
                    "the host of inferd at a:8002 has used over 90% of its CPU for 15 minutes",
                    job="inferd",
                ),
            ),
        ],
    },
]


def test_every_service_alert_has_a_case() -> None:
    tested = {t["alertname"] for case in CASES for t in case["alert_rule_test"]}
    assert tested == {rule["alert"] for rule in _alerts(SERVICE)}


@needs_promtool
def test_service_alerts_fire_when_they_should_and_only_then(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    document = yaml.safe_load(SERVICE.read_text(encoding="utf-8"))
    for group in document["groups"]:
        for rule in group["rules"]:
            if "annotations" in rule:
                rule["annotations"] = {"summary": rule["annotations"]["summary"]}
    rules = tmp_path / "service-alerts.yml"
    rules.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    tests = tmp_path / "service-alerts.test.yml"
    spec = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", **case} for case in CASES],
    }
    tests.write_text(yaml.safe_dump(spec, allow_unicode=True), encoding="utf-8")
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(tests)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
