"""``inferd plan``: the command end to end on a small curve and a two-hour trace, its files,
and its one-line refusals."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from inferd.cli.main import main

HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency"
)
CURVE = f"""\
{HEADER}
1,400,0,100,100,10,2000,10,0,2400,3400,3800,4000
2,700,0,100,300,10,2000,10,0,2800,3900,4400,5000
4,1000,0,100,1200,10,2000,10,0,4000,5600,6400,8000
8,1150,0,100,4000,10,2000,10,0,7000,9800,11200,14000
"""

TRAFFIC = "daily:low=300,high=3000,period=2h,peak=1h + spike:height=2500,at=20m,duration=5m"


@pytest.fixture
def curve(tmp_path: Path) -> Path:
    path = tmp_path / "curve.csv"
    path.write_text(CURVE)
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_plan_with_every_output(
    curve: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json, out_csv, out_html = tmp_path / "p.json", tmp_path / "p.csv", tmp_path / "p.html"
    code, out, err = run(
        capsys,
        "--capacity", str(curve),
        "--traffic", TRAFFIC,
        "--metric", "pending=1",
        "--metric", "cpu=70",
        "--min-replicas", "1,4",
        "--max-replicas", "20",
        "--slo-p99", "20ms",
        "--pod-hour-cost", "0.5",
        "--json", str(out_json),
        "--csv", str(out_csv),
        "--plot", str(out_html),
    )  # fmt: skip
    assert code == 0, err
    assert "peaks at 1,150 req/s" in out
    assert "traffic: 2 h" in out
    for label in ("minReplicas 1", "minReplicas 4", "fixed "):
        assert label in out
    doc = json.loads(out_json.read_text())
    assert doc["format"] == "inferd-plan/1"
    runs = {r["label"]: r for r in doc["runs"]}
    cold, warm = runs["minReplicas 1"], runs["minReplicas 4"]
    assert warm["totals"]["pod_hours"] > cold["totals"]["pod_hours"]
    assert warm["totals"]["failed"] <= cold["totals"]["failed"]
    assert cold["totals"]["cost"] == pytest.approx(cold["totals"]["pod_hours"] * 0.5)
    assert 0 <= cold["totals"]["share_over_slo"] <= 1
    assert len(cold["series"]["t_s"]) == 120  # two hours of minutes
    assert min(cold["series"]["replicas"]) >= 1
    assert max(cold["series"]["replicas"]) <= 20
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert len(rows) == 3 * 120
    assert {"hpa_pending", "hpa_cpu", "p99_ms"} <= set(rows[0])
    page = out_html.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "plotly" in page
    assert "minReplicas 4: replicas" in page


def test_a_target_one_replica_never_reaches(
    curve: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # at its peak a replica of this curve holds 1150 x 4 ms = 4.6 pending requests
    code, out, err = run(
        capsys, "--capacity", str(curve), "--traffic", "constant:rate=500", "--duration", "10m",
        "--metric", "pending=10", "--metric", "cpu=70",
    )  # fmt: skip
    assert code == 0, err
    assert "pending: never reached" in out
    assert "warning: one replica never reaches pending=10 (4.6 at its peak" in out


def test_an_hpa_manifest(curve: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hpa = tmp_path / "hpa.yaml"
    hpa.write_text(
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: x}\n"
        "spec:\n  minReplicas: 2\n  maxReplicas: 9\n  metrics:\n"
        "    - type: Pods\n      pods:\n"
        "        metric: {name: nv_inference_pending_request_count}\n"
        "        target: {type: AverageValue, averageValue: '1'}\n"
    )
    out_json = tmp_path / "p.json"
    code, _out, err = run(
        capsys, "--capacity", str(curve), "--traffic", TRAFFIC, "--hpa", str(hpa),
        "--no-fixed-fleet", "--json", str(out_json),
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out_json.read_text())
    assert [r["label"] for r in doc["runs"]] == ["minReplicas 2"]
    assert doc["settings"]["max_replicas"] == 9
    assert doc["settings"]["metrics"] == {"pending": 1.0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "name what the HPA scales on"),
        (["--metric", "rps=5"], "write pending=N"),
        (["--metric", "cpu=70", "--metric", "cpu=50"], "each metric can be given once"),
        (["--metric", "cpu=62.5"], "whole percentage"),
        (["--metric", "queue=fast"], "not a duration"),
        (["--metric", "pending=1", "--min-replicas", "a,b"], "whole numbers"),
        (["--metric", "pending=1", "--min-replicas", "12"], "is below minReplicas (12)"),
        (["--metric", "pending=1", "--scale-down-policy", "Pods:4"], "TYPE:VALUE:PERIOD"),
        (["--metric", "pending=1", "--scale-up-policy", "Nodes:4:15s"], "Pods or Percent"),
        (["--metric", "pending=1", "--sync-period", "1.5s"], "whole number of seconds"),
        (["--metric", "pending=1", "--duration", "40d"], "between 1 s and 31 days"),
        (["--metric", "pending=1", "--request-timeout", "0s"], "longer than 0"),
        (["--metric", "pending=1", "--initial-replicas", "0"], "at least 1"),
        (["--metric", "pending=1", "--tolerance", "-1"], "cannot be negative"),
    ],
)
def test_refusals_are_one_line(
    curve: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _out, err = run(capsys, "--capacity", str(curve), "--traffic", "constant:rate=10", *args)
    assert code == 2
    assert err.startswith("inferd plan: error: ")
    assert message in err
    assert err.count("\n") == 1


def test_a_missing_curve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys, "--capacity", str(tmp_path / "none.json"), "--traffic", "constant:rate=1",
        "--metric", "pending=1",
    )  # fmt: skip
    assert code == 2
    assert "cannot read the capacity curve" in err


def test_help_names_the_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    assert "nv_inference_pending_request_count" in out
    assert "spike:height=" in out
