"""What operators are given to watch inferd, against a real server: every metric the Grafana
dashboard and the Prometheus rules read is one ``inferd serve`` exports (with drift monitoring
and the payload log on), and the fraud drift replay example raises its alert on a shifted
feature and none on in-distribution traffic."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.examples.tabular_models import fraud_split
from inferd.testing import ServerProcess, running_server
from tests.helpers.monitoring_assets import ROOT, exported_names, used_names

pytestmark = pytest.mark.e2e

EXAMPLE = ROOT / "examples" / "models" / "fraud_xgboost"
REPLAY = ROOT / "examples" / "monitoring" / "fraud_drift_replay.py"
ROLLOUT = "inferd_rollout_"
ROLLOUT_MODULE = "inferd.metrics.rollout"


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


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    payloads = tmp_path_factory.mktemp("payloads")
    flags = ["--monitor-drift", "--drift-window-rows", "200", "--drift-evaluate-every-rows", "100"]
    with running_server([repo], [*flags, "--payload-log", str(payloads)]) as proc:
        _, x_test, _, _ = fraud_split()
        with httpclient.InferenceServerClient(proc.http_url) as client:
            for start in range(0, 400, 100):  # fill a drift window, log some payloads
                tensor = httpclient.InferInput("input__0", [100, 20], "FP32")
                tensor.set_data_from_numpy(x_test[start : start + 100])
                client.infer("fraud_xgboost", [tensor])
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
        if not name.startswith(ROLLOUT) and name not in exported
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
