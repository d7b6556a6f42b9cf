"""The pure pieces of examples/monitoring/fraud_drift_replay.py: its options, the shifted rows,
and reading one feature's drift metrics from the exposition the server's collector writes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from inferd.core.drift import FeatureDrift, MonitorStatistics, VersionDrift
from inferd.metrics.drift import DriftCollector

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "monitoring" / "fraud_drift_replay.py"


@pytest.fixture(scope="module")
def replay() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fraud_drift_replay", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_shifted_moves_one_column_of_a_copy(replay: ModuleType) -> None:
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = replay.shifted(rows, 2, 0.5)
    np.testing.assert_array_equal(out[:, 2], rows[:, 2] + 0.5)
    np.testing.assert_array_equal(np.delete(out, 2, axis=1), np.delete(rows, 2, axis=1))
    assert rows[0, 2] == 2.0  # the input is untouched


def test_feature_metrics_reads_one_feature_of_one_model(replay: ModuleType) -> None:
    features = (
        FeatureDrift(
            "input__0[3]", "input__0", "input", "numeric", psi=0.25, ks_statistic=0.2,
            ks_pvalue=1e-9, alert=True,
        ),
        FeatureDrift("input__0[4]", "input__0", "input", "numeric", psi=0.01, ks_pvalue=0.5),
    )  # fmt: skip
    other = (FeatureDrift("input__0[3]", "input__0", "input", "numeric", psi=0.9),)
    stats = MonitorStatistics(
        0,
        0,
        0,
        (
            VersionDrift("fraud_xgboost", 1, 1000, features=features),
            VersionDrift("other", 1, 1000, features=other),
        ),
    )
    registry = CollectorRegistry()
    registry.register(DriftCollector(lambda: stats))
    text = generate_latest(registry).decode()
    got = replay.feature_metrics(text, "fraud_xgboost", "input__0[3]")
    assert got == {
        "inferd_drift_alert": 1.0,
        "inferd_drift_psi": 0.25,
        "inferd_drift_ks_statistic": 0.2,
        "inferd_drift_ks_pvalue": 1e-9,
    }
    assert replay.feature_metrics(text, "fraud_xgboost", "input__0[9]") == {}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--feature", "20"], "--feature must be 0-19"),
        (["--shift", "0"], "--shift 0 cannot drift"),
        (["--url", "h:8000", "--window-rows", "500"], "leave them out with --url"),
        (["--metrics-url", "h:8002"], "go with --url"),
        (["--report-every", "0"], "must be at least 1"),
    ],
)
def test_options_that_cannot_work_are_refused(
    replay: ModuleType, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        replay.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_status_line_shows_missing_statistics_as_dashes(replay: ModuleType) -> None:
    seen = replay.Observation(500, 1, (), None, None, None, False)
    assert replay.status_line("in-distribution", 500, seen).split() == [
        "in-distribution", "500", "1", "-", "-", "-", "calm", "-",
    ]  # fmt: skip
