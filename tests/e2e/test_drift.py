"""Drift monitoring seen from outside: ``inferd monitor profile`` writes the fraud model's
profile, ``inferd serve --monitor-drift`` watches the traffic tritonclient sends: an
in-distribution stream raises no alert, a stream with one feature shifted raises that
feature's alert, and both the metrics and the HTTP report say so."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.examples.tabular_models import fraud_split
from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "models" / "fraud_xgboost"
SHIFTED = 3  # the feature the shifted stream moves
ROWS = 100  # rows per request


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    x_train, x_test, _, _ = fraud_split()
    return x_train, x_test


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, data: tuple[np.ndarray, np.ndarray]) -> Path:
    root = tmp_path_factory.mktemp("drift_repo")
    shutil.copytree(EXAMPLE, root / "fraud_xgboost")
    train = root.parent / "train.npz"
    np.savez(train, input__0=data[0], label=np.zeros(len(data[0])))
    done = subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "monitor", "profile", "fraud_xgboost",
         "--model-repository", str(root), "--data", str(train), "--exclude", "label"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "22 feature(s) from 7500 row(s)" in done.stdout  # 20 inputs, 2 outputs
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo], ["--monitor-drift", "--drift-evaluate-every-rows", "200"]) as proc:
        yield proc


def _report(server: ServerProcess, path: str = "/v2/models/fraud_xgboost/drift") -> Any:
    with urllib.request.urlopen(f"http://{server.http_url}{path}", timeout=10) as reply:
        return json.load(reply)


def _metrics(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def _observed(server: ServerProcess, rows: int) -> dict[str, Any]:
    """The report once the monitor's thread has seen ``rows`` rows (it drains every 50 ms)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            version: dict[str, Any] = _report(server)["versions"][0]
        except urllib.error.HTTPError as exc:  # 404 until the first request is processed
            if exc.code != 404 or time.monotonic() > deadline:
                raise
        else:
            if version["rows"] >= rows or time.monotonic() > deadline:
                return version
        time.sleep(0.05)


def _alert(metrics: str, feature: str) -> float:
    labels = f'feature="{feature}",model="fraud_xgboost",role="input",tensor="input__0"'
    line = next(li for li in metrics.splitlines() if li.startswith(f"inferd_drift_alert{{{labels}"))
    return float(line.rsplit(" ", 1)[1])


def test_in_distribution_then_shifted_stream(
    server: ServerProcess, data: tuple[np.ndarray, np.ndarray]
) -> None:
    x_train, x_test = data
    client = httpclient.InferenceServerClient(server.http_url)
    held_out = x_test[np.random.default_rng(0).permutation(len(x_test))][:2000]
    for start in range(0, len(held_out), ROWS):
        rows = held_out[start : start + ROWS]
        tensor = httpclient.InferInput("input__0", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        client.infer("fraud_xgboost", [tensor])
    calm = _observed(server, 2000)
    assert calm["rows"] == 2000
    assert calm["evaluations"] >= 5
    assert calm["alerts"] == []
    assert _alert(_metrics(server), f"input__0[{SHIFTED}]") == 0.0

    shifted = held_out.copy()
    shifted[:, SHIFTED] += 0.25 * x_train[:, SHIFTED].std()
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    for start in range(0, len(shifted), ROWS):
        rows = shifted[start : start + ROWS]
        tensor = grpcclient.InferInput("input__0", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        grpc.infer("fraud_xgboost", [tensor])
    drifted = _observed(server, 4000)
    assert f"input__0[{SHIFTED}]" in drifted["alerts"]
    assert [a for a in drifted["alerts"] if a.startswith("input__0")] == [f"input__0[{SHIFTED}]"]
    feature = next(f for f in drifted["features"] if f["feature"] == f"input__0[{SHIFTED}]")
    assert feature["ks_pvalue"] < drifted["ks_level"]
    metrics = _metrics(server)
    assert _alert(metrics, f"input__0[{SHIFTED}]") == 1.0
    assert _alert(metrics, "input__0[0]") == 0.0
    assert "inferd_drift_ks_statistic{" in metrics
    assert 'inferd_drift_observed_rows_total{model="fraud_xgboost",version="1"} 4000.0' in metrics
    assert "inferd_drift_dropped_requests_total 0.0" in metrics
    # the version's own route says the same; a version without a profile is a clear 404
    assert _report(server, "/v2/models/fraud_xgboost/versions/1/drift")["versions"][0]["alerts"]
    with pytest.raises(urllib.error.HTTPError) as missing:
        _report(server, "/v2/models/fraud_xgboost/versions/2/drift")
    assert missing.value.code == 404
    assert "drift_profile.json" in json.load(missing.value)["error"]


def test_the_report_route_without_monitoring(repo: Path) -> None:
    with running_server([repo]) as proc, pytest.raises(urllib.error.HTTPError) as off:
        _report(proc)
    assert off.value.code == 404
    assert "--monitor-drift" in json.load(off.value)["error"]
