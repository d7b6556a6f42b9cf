"""The drift monitor as an observer: profiles found in version folders, a bounded queue that
drops and counts, alerts on a shifted stream and none on an in-distribution one, the report
and the Prometheus metrics read from its snapshot."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from inferd.core.datatypes import BY_NAME
from inferd.core.drift import DriftSettings
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec, TensorSpec
from inferd.errors import InvalidArgumentError, NotFoundError
from inferd.metrics.drift import DriftCollector
from inferd.monitoring.drift.build import TensorData, build_profile
from inferd.monitoring.drift.data import read_reference
from inferd.monitoring.drift.monitor import DriftMonitor
from inferd.monitoring.drift.reference import PROFILE_FILE, Profile, read_profile, write_profile
from inferd.monitoring.drift.report import drift_report

FEATURES = 5
rng = np.random.default_rng(11)
REFERENCE = rng.normal(size=(5000, FEATURES)).astype(np.float32)


def _spec(name: str = "tab") -> ModelSpec:
    return ModelSpec(
        name=name,
        platform="",
        backend="fil",
        max_batch_size=64,
        inputs=(TensorSpec("x", BY_NAME["FP32"], (FEATURES,)),),
        outputs=(TensorSpec("score", BY_NAME["FP32"], (1,)),),
        instance_groups=(),
        parameters={},
        default_model_filename="",
    )


def _score(x: np.ndarray) -> np.ndarray:
    return x[:, :1] * 0.5


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    version = tmp_path / "tab" / "1"
    version.mkdir(parents=True)
    profile = build_profile(
        "tab",
        1,
        [
            TensorData("x", "input", "FP32", REFERENCE),
            TensorData("score", "output", "FP32", _score(REFERENCE)),
        ],
        "reference.npz",
    )
    write_profile(profile, version / PROFILE_FILE)
    return tmp_path


def _observe(monitor: DriftMonitor, spec: ModelSpec, rows: np.ndarray, batch: int = 1) -> None:
    for start in range(0, len(rows), batch):
        x = rows[start : start + batch]
        monitor.observe(spec, 1, InferRequest("tab", {"x": x}), {"score": _score(x)})
        if len(monitor._queue) > 500:
            monitor.drain()
    monitor.drain()


SETTINGS = DriftSettings(window_rows=500, evaluate_every_rows=100)


def test_in_distribution_raises_nothing_and_a_shift_raises_its_feature(repo: Path) -> None:
    monitor = DriftMonitor(SETTINGS, [repo])
    spec = _spec()
    _observe(monitor, spec, rng.normal(size=(3000, FEATURES)).astype(np.float32))
    (calm,) = monitor.statistics().versions
    assert calm.rows == 3000
    assert calm.evaluations >= 25
    assert calm.alerts == 0
    shifted = rng.normal(size=(1500, FEATURES)).astype(np.float32)
    shifted[:, 2] += 0.5
    _observe(monitor, spec, shifted, batch=10)
    (drifted,) = monitor.statistics().versions
    alerted = {f.feature for f in drifted.features if f.alert}
    assert alerted == {"x[2]"}
    feature = next(f for f in drifted.features if f.feature == "x[2]")
    assert feature.ks_pvalue is not None
    assert feature.ks_pvalue < SETTINGS.alpha / drifted.tests
    # a shift in the first feature moves the prediction too: prediction drift
    shifted[:, 0] += 0.5
    _observe(monitor, spec, shifted, batch=10)
    (both,) = monitor.statistics().versions
    assert {"x[0]", "score"} <= {f.feature for f in both.features if f.alert}


def test_report_and_metrics_read_the_snapshot(repo: Path) -> None:
    monitor = DriftMonitor(SETTINGS, [repo])
    x = rng.normal(size=(800, FEATURES)).astype(np.float32)
    x[:, 1] += 1.0
    x[0, 3] = np.nan
    _observe(monitor, _spec(), x, batch=50)
    report = drift_report(monitor.statistics(), SETTINGS, "tab")
    (version,) = report["versions"]
    assert version["version"] == "1"
    assert "x[1]" in version["alerts"]
    nan = {f["feature"]: f["nan"] for f in version["features"]}
    assert nan["x[3]"] == 1
    json.dumps(report)  # JSON-ready
    assert drift_report(monitor.statistics(), SETTINGS, "tab", "1")["versions"]
    with pytest.raises(NotFoundError, match=r"drift_profile\.json"):
        drift_report(monitor.statistics(), SETTINGS, "tab", "2")
    registry = CollectorRegistry()
    registry.register(DriftCollector(monitor.statistics))
    text = generate_latest(registry).decode()
    labels = 'feature="x[1]",model="tab",role="input",tensor="x",version="1"'
    assert f"inferd_drift_alert{{{labels}}} 1.0" in text
    assert f"inferd_drift_psi{{{labels}}}" in text
    assert f"inferd_data_quality_nan_total{{{labels.replace('x[1]', 'x[3]')}}} 1.0" in text
    assert 'inferd_drift_observed_rows_total{model="tab",version="1"} 800.0' in text


def test_a_full_queue_drops_and_counts_without_blocking(repo: Path) -> None:
    monitor = DriftMonitor(DriftSettings(queue_size=3), [repo])
    x = REFERENCE[:1]
    spec = _spec()
    for _ in range(10):
        monitor.observe(spec, 1, InferRequest("tab", {"x": x}), {"score": _score(x)})
    stats = monitor.statistics()
    assert (stats.queued, stats.dropped) == (3, 7)
    monitor.drain()
    assert monitor.statistics().versions[0].requests == 3


def test_the_observer_copies_what_it_keeps(repo: Path) -> None:
    monitor = DriftMonitor(SETTINGS, [repo])
    x = np.zeros((1, FEATURES), dtype=np.float32)
    monitor.observe(_spec(), 1, InferRequest("tab", {"x": x}), {"score": _score(x)})
    x[0, 0] = np.nan  # the client reuses its buffer (a shared-memory region, say)
    monitor.drain()
    (version,) = monitor.statistics().versions
    assert all(f.nan == 0 for f in version.features)


def test_versions_without_a_profile_are_skipped_on_the_loop(repo: Path, tmp_path: Path) -> None:
    (repo / "other" / "1").mkdir(parents=True)
    monitor = DriftMonitor(SETTINGS, [repo])
    spec = _spec("other")
    x = REFERENCE[:1]
    monitor.observe(spec, 1, InferRequest("other", {"x": x}), {"score": _score(x)})
    monitor.drain()
    monitor.observe(spec, 1, InferRequest("other", {"x": x}), {"score": _score(x)})
    assert monitor.statistics().queued == 0  # known to have no profile: nothing queued
    assert monitor.statistics().versions == ()


def test_a_profile_for_other_tensors_is_refused(
    repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = ModelSpec(
        name="tab",
        platform="",
        backend="fil",
        max_batch_size=64,
        inputs=(TensorSpec("renamed", BY_NAME["FP32"], (FEATURES,)),),
        outputs=(),
        instance_groups=(),
        parameters={},
        default_model_filename="",
    )
    monitor = DriftMonitor(SETTINGS, [repo])
    monitor.observe(spec, 1, InferRequest("tab", {"renamed": REFERENCE[:2]}), {})
    monitor.drain()
    assert monitor.statistics().versions == ()
    assert "which the model does not have" in caplog.text


def test_the_worker_starts_and_stops(repo: Path) -> None:
    monitor = DriftMonitor(SETTINGS, [repo])
    monitor.start()
    x = REFERENCE[:10]
    monitor.observe(_spec(), 1, InferRequest("tab", {"x": x}), {"score": _score(x)})
    monitor.stop()  # drains what is queued before it ends
    assert monitor.statistics().versions[0].rows == 10


def test_profile_round_trip_and_damaged_files(repo: Path, tmp_path: Path) -> None:
    path = repo / "tab" / "1" / PROFILE_FILE
    profile = read_profile(path)
    assert isinstance(profile, Profile)
    assert [t.name for t in profile.tensors] == ["x", "score"]
    assert len(profile.tensors[0].columns[0].sample) == 5000
    assert Profile.from_json(profile.to_json()) == profile
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(InvalidArgumentError, match="not a valid drift profile"):
        read_profile(bad)


def test_reference_data_from_npz_parquet_and_csv(tmp_path: Path) -> None:
    spec = _spec()
    npz = tmp_path / "ref.npz"
    np.savez(npz, x=REFERENCE[:100], label=np.zeros(100))
    data = read_reference(npz, spec.inputs, spec.outputs, exclude=["label"])
    assert data.arrays["x"].shape == (100, FEATURES)
    csv = tmp_path / "ref.csv"
    header = ",".join([f"f{i}" for i in range(FEATURES)] + ["score"])
    rows = "\n".join(",".join(str(v) for v in (*r, r[0] * 0.5)) for r in REFERENCE[:50])
    csv.write_text(header + "\n" + rows + "\n")
    data = read_reference(csv, spec.inputs, spec.outputs)
    assert data.names["x"] == tuple(f"f{i}" for i in range(FEATURES))
    assert data.arrays["score"].shape == (50, 1)
    with pytest.raises(InvalidArgumentError, match="rows of shape"):
        read_reference(csv, spec.inputs, spec.outputs, exclude=["f0"])  # 4 columns for x
    with pytest.raises(InvalidArgumentError, match="neither a tensor"):
        read_reference(npz, spec.inputs, spec.outputs)  # the labels, not excluded
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(InvalidArgumentError, match="unsupported data format"):
        read_reference(tmp_path / "x.txt", spec.inputs, spec.outputs)


def test_a_reload_starts_afresh_and_skips_the_old_loads_late_requests(repo: Path) -> None:
    monitor = DriftMonitor(SETTINGS, [repo])
    old, new = _spec(), _spec()  # two loads of version 1: distinct specs
    x = REFERENCE[:10]
    monitor.observe(old, 1, InferRequest("tab", {"x": x}), {"score": _score(x)})
    monitor.drain()
    assert monitor.statistics().versions[0].rows == 10
    monitor.observe(new, 1, InferRequest("tab", {"x": x[:4]}), {"score": _score(x[:4])})
    monitor.observe(old, 1, InferRequest("tab", {"x": x}), {"score": _score(x)})  # in flight
    monitor.drain()
    assert monitor.statistics().versions[0].rows == 4
