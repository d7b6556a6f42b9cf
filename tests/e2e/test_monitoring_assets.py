"""What operators are given to watch inferd, against a real server: every metric the Grafana
dashboard and the Prometheus rules read is one ``inferd serve`` exports (with drift monitoring
and the payload log on), a real Prometheus (Debian's ``prometheus`` package, when installed)
scraping it answers every dashboard query and evaluates every rule without error, and the fraud
drift replay example raises its alert on a shifted feature and none on in-distribution traffic."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.examples.tabular_models import fraud_split
from inferd.testing import ServerProcess, running_server
from tests.helpers.monitoring_assets import (
    ROOT,
    RULE_FILES,
    dashboard,
    exported_names,
    is_on_demand,
    used_names,
)

pytestmark = pytest.mark.e2e

EXAMPLE = ROOT / "examples" / "models" / "fraud_xgboost"
REPLAY = ROOT / "examples" / "monitoring" / "fraud_drift_replay.py"
ROLLOUT = "inferd_rollout_"
ROLLOUT_MODULE = "inferd.metrics.rollout"
PROMETHEUS = shutil.which("prometheus")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the fraud model with its reference profile."""
    root = tmp_path_factory.mktemp("monitoring") / "models"
    shutil.copytree(EXAMPLE, root / "fraud_xgboost")
    x_train, _, _, _ = fraud_split()
    data = root.parent / "train.npz"
    np.savez(data, input__0=x_train)
    done = subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "monitor", "profile", "fraud_xgboost",
         "--model-repository", str(root), "--data", str(data)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root


CANARY = """\
kind: canary
primary: {version: 1}
candidate: {version: 2}
stages: [0.5, 1.0]
min_requests: 100000
max_disagreement: 0.5
feedback: {reward: binary}
seed: 7
"""


def _send(server: ServerProcess, requests: int, rows: int = 10, ids: str = "") -> None:
    _, x_test, _, _ = fraud_split()
    with httpclient.InferenceServerClient(server.http_url) as client:
        for i in range(requests):
            start = (i * rows) % (len(x_test) - rows)
            tensor = httpclient.InferInput("input__0", [rows, 20], "FP32")
            tensor.set_data_from_numpy(x_test[start : start + rows])
            client.infer("fraud_xgboost", [tensor], request_id=f"{ids}{i}" if ids else "")


FEEDBACK_TOKEN = "assets-feedback"


def _feedback(server: ServerProcess, request_id: str, reward: float) -> None:
    body = json.dumps({"id": request_id, "reward": reward}).encode()
    url = f"http://{server.http_url}/v2/models/fraud_xgboost/feedback"
    headers = {"Authorization": f"Bearer {FEEDBACK_TOKEN}"}
    request = urllib.request.Request(url, body, headers, method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The profiled model in two versions under a canary policy that never moves on (so every
    rollout metric has values), with drift monitoring and the payload log on."""
    root = tmp_path_factory.mktemp("served") / "models"
    model = shutil.copytree(repo / "fraud_xgboost", root / "fraud_xgboost")
    shutil.copytree(model / "1", model / "2")
    with (model / "config.pbtxt").open("a", encoding="utf-8") as config:
        config.write("version_policy: { all: { } }\n")
    (model / "rollout.yaml").write_text(CANARY, encoding="utf-8")
    payloads = tmp_path_factory.mktemp("payloads")
    flags = ["--monitor-drift", "--drift-window-rows", "200", "--drift-evaluate-every-rows", "100"]
    env = {"INFERD_FEEDBACK_TOKEN": FEEDBACK_TOKEN}
    with running_server([root], [*flags, "--payload-log", str(payloads)], env=env) as proc:
        _send(proc, 80, ids="r")  # fills both versions' drift windows, logs payloads
        for i in range(80):
            _feedback(proc, f"r{i}", i % 2)
        yield proc


def _exported(server: ServerProcess) -> set[str]:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as reply:
        return exported_names(reply.read().decode())


def test_the_server_exports_every_metric_the_dashboard_and_rules_read(
    server: ServerProcess,
) -> None:
    exported = _exported(server)
    # the families of each component are there (a check of the check)
    assert {"inferd_drift_psi", "inferd_payload_log_requests_total", "inferd_server_ready"} <= (
        exported
    )
    missing = {
        name: sorted(where)
        for name, where in used_names().items()
        if not name.startswith(ROLLOUT) and not is_on_demand(name) and name not in exported
    }
    assert not missing, f"read but not exported: {missing}"


def test_rollout_metrics_read_are_the_ones_the_rollout_declares(server: ServerProcess) -> None:
    """Rollout metrics appear only where a traffic policy runs; their names are checked against
    the collector's source, which declares them."""
    wanted = {name for name in used_names() if name.startswith(ROLLOUT)}
    assert len(wanted) >= 11
    spec = importlib.util.find_spec(ROLLOUT_MODULE)
    if spec is None or spec.origin is None:
        pytest.skip(f"{ROLLOUT_MODULE} does not exist yet: rollout metrics are not exported")
    source = Path(spec.origin).read_text(encoding="utf-8")
    exported = _exported(server)
    missing = [
        name
        for name in sorted(wanted)
        if name not in exported and f'"{name.removesuffix("_total")}"' not in source
    ]
    assert not missing, f"{ROLLOUT_MODULE} declares none of {missing}"


def test_the_replay_raises_the_alert_on_the_shifted_feature_only(repo: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPLAY), "--model-repository", str(repo),
         "--window-rows", "500", "--evaluate-every-rows", "250",
         "--in-distribution", "1500", "--shift", "1.0", "--feature", "7",
         "--report-every", "250", "--max-drifted", "2500"],
        capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "window_rows=500" in done.stdout  # the settings asked for reached the server
    calm = [line for line in lines if line.startswith("in-distribution")]
    drifted = [line for line in lines if line.startswith("drift +1.00 sd")]
    assert len(calm) == 6  # 1500 requests, a line every 250
    assert all(line.split()[-2:] == ["calm", "-"] for line in calm), calm
    # the window filled and was evaluated before the shift: the statistics were read
    assert re.search(r" \d+\.\d{3} +\d\.\de[-+]\d\d +\d\.\d{3} +calm", calm[-1]), calm[-1]
    assert drifted[-1].split()[-2:] == ["RAISED", "input__0[7]"], drifted[-1]
    summary = re.search(r"ALERT: input__0\[7\] raised after (\d+) drifted requests", done.stdout)
    assert summary is not None, done.stdout
    assert int(summary.group(1)) == 250 * len(drifted) <= 2500
    assert "FALSE ALARM" not in done.stdout


def test_the_replay_refuses_a_server_without_drift_monitoring(repo: Path) -> None:
    with running_server([repo]) as plain:
        done = subprocess.run(
            [sys.executable, str(REPLAY), "--url", plain.http_url,
             "--grpc-url", plain.grpc_url, "--metrics-url", plain.metrics_url],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: the server at {plain.http_url} does not monitor drift: start it with "
        "inferd serve --monitor-drift"
    ]


# -- a real Prometheus scraping the server -----------------------------------------------------

# the panels that must show data on this server (a model with traffic under a canary, drift
# monitoring, the payload log; no response cache, failures or drift alert)
PANELS_WITH_DATA = {
    "Ready", "Requests/s", "Failed share", "p99 latency", "Pending requests", "Drift alerts",
    "Requests per second", "Latency p50 / p95 / p99", "Queue time vs compute time",
    "Batch size", "Process CPU", "Memory", "Payload log", "Batches sent, by why",
    "Requests per second, by version", "Latency by version", "Where the time goes",
    "Inferences per execution", "Pending and refused", "PSI", "Kolmogorov-Smirnov p-value",
    "Wasserstein distance", "Monitor throughput", "Monitor health", "Window fill",
    "Requests per second, by variant", "Error share, by variant", "p99 latency, by variant",
    "Traffic share", "Reward mean and feedback", "P(better)", "Shadow agreement",
    "Canary stage", "Canary rollbacks",
}  # fmt: skip


class Prometheus:
    """``prometheus`` on a port it picks (read from its log), scraping one target every second
    and evaluating the rule files every second."""

    def __init__(self, folder: Path, target: str) -> None:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(path) for path in RULE_FILES],
            "scrape_configs": [{"job_name": "inferd", "static_configs": [{"targets": [target]}]}],
        }
        (folder / "prometheus.yml").write_text(json.dumps(config), encoding="utf-8")
        self._log = folder / "prometheus.log"
        assert PROMETHEUS is not None
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(
                [PROMETHEUS, f"--config.file={folder / 'prometheus.yml'}",
                 f"--storage.tsdb.path={folder / 'data'}", "--web.listen-address=127.0.0.1:0"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.url = self._wait_for(self._listening, "to listen")
        self._wait_for(self._ready, "become ready")  # it listens before its storage is open

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=10) as reply:
                return bool(reply.status == 200)
        except urllib.error.HTTPError:
            return False

    def _listening(self) -> str | None:
        found = re.search(r'msg="Listening on" address=(\S+)', self._log.read_text())
        return f"http://{found.group(1)}" if found else None

    def _wait_for(self, check: Callable[[], Any], what: str, timeout_s: float = 30) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self._process.poll() is None, self._log.read_text()
            value = check()
            if value:
                return value
            assert time.monotonic() < deadline, (
                f"prometheus did not {what}: {self._log.read_text()}"
            )
            time.sleep(0.1)

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as reply:
            answer = json.load(reply)
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def wait_for(self, check: Callable[[], Any], what: str) -> Any:
        return self._wait_for(check, what)

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _as_query(expr: str) -> str:
    """A dashboard query as Grafana would send it, every instance and model chosen."""
    expr = re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", expr)
    for variable, value in {
        "$__rate_interval": "30s",
        "$__range": "5m",
        "$instance": ".*",
        "$model": ".*",
    }.items():
        expr = expr.replace(variable, value)
    return expr


@pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus is not installed (apt-get install prometheus)"
)
def test_prometheus_answers_every_dashboard_query_and_evaluates_every_rule(
    server: ServerProcess, tmp_path: Path
) -> None:
    prometheus = Prometheus(tmp_path, server.metrics_url)
    try:
        prometheus.wait_for(lambda: prometheus.query('up{job="inferd"} == 1'), "scrape inferd")
        for _ in range(4):  # traffic across several scrapes, so that rates have two points
            _send(server, 5)
            time.sleep(1)
        prometheus.wait_for(
            lambda: prometheus.query('count_over_time(up{job="inferd"}[1m]) >= 6'), "scrape more"
        )
        board = dashboard()
        for variable in board["templating"]["list"][1:]:
            assert prometheus.query(_as_query(variable["query"]["query"])), variable["name"]
        empty = []
        for panel in board["panels"]:
            if panel["type"] == "row":
                continue
            answers = [prometheus.query(_as_query(t["expr"])) for t in panel["targets"]]
            if panel["title"] in PANELS_WITH_DATA and not any(answers):
                empty.append(panel["title"])
        assert not empty, f"panels without data: {empty}"
        for annotation in board["annotations"]["list"]:
            if "expr" in annotation:
                prometheus.query(_as_query(annotation["expr"]))

        def evaluated() -> list[dict[str, Any]] | None:
            groups = prometheus.api("rules")["groups"]
            rules = [rule for group in groups for rule in group["rules"]]
            done = all(not rule["lastEvaluation"].startswith("0001") for rule in rules)
            return rules if done else None

        rules = prometheus.wait_for(evaluated, "evaluate every rule")
        names = {rule["name"] for rule in rules}
        assert {"InferdNotReady", "InferdHighErrorRate", "InferdFeatureDrift"} <= names
        broken = {rule["name"]: rule.get("lastError") for rule in rules if rule["health"] != "ok"}
        assert not broken, broken
        firing = {a["labels"]["alertname"] for a in prometheus.api("alerts")["alerts"]}
        assert not firing & {"InferdDown", "InferdNotReady", "InferdHighErrorRate"}, firing
    finally:
        prometheus.stop()
