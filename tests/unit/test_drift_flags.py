"""``inferd serve``'s drift flags: honoured when monitoring is on, refused loudly otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.cli.main import build_parser, main
from inferd.cli.serve import config_from_args
from inferd.core.drift import DriftSettings
from inferd.errors import InferdError


def _config(*flags: str) -> object:
    return config_from_args(build_parser().parse_args(["serve", "--model-repository", ".", *flags]))


def test_off_by_default() -> None:
    assert _config().drift is None  # type: ignore[attr-defined]


def test_flags_fill_the_settings() -> None:
    drift = _config(
        "--monitor-drift",
        "--drift-window-rows", "2000",
        "--drift-evaluate-every-rows", "500",
        "--drift-alpha", "0.01",
        "--drift-psi-threshold", "0.25",
        "--drift-raise-after", "3",
        "--drift-clear-after", "5",
        "--drift-queue-size", "100",
    ).drift  # type: ignore[attr-defined]  # fmt: skip
    assert drift == DriftSettings(
        window_rows=2000,
        evaluate_every_rows=500,
        alpha=0.01,
        psi_threshold=0.25,
        raise_after=3,
        clear_after=5,
        queue_size=100,
    )


def test_an_option_without_monitoring_is_refused() -> None:
    with pytest.raises(InferdError, match="--drift-window-rows needs --monitor-drift"):
        _config("--drift-window-rows", "2000")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--drift-window-rows", "10"], "must be >= 50"),
        (["--drift-evaluate-every-rows", "5000"], "between 1 and --drift-window-rows"),
        (["--drift-alpha", "1.5"], "between 0 and 1"),
        (["--drift-psi-threshold", "0.05"], "at least the clear level"),
        (["--drift-raise-after", "0"], ">= 1"),
        (["--drift-queue-size", "0"], ">= 1"),
    ],
)
def test_bad_values_are_one_line(flags: list[str], message: str) -> None:
    with pytest.raises(InferdError, match=message):
        _config("--monitor-drift", *flags)


def test_monitor_profile_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    data = tmp_path / "d.npz"
    base = ["monitor", "profile", "m", "--model-repository", str(tmp_path), "--data"]
    assert main([*base, str(tmp_path / "missing.npz")]) == 2
    assert "missing.npz: no such file" in capsys.readouterr().err
    data.write_bytes(b"")
    assert main([*base, str(data), "--version", "3"]) == 2
    assert "no version 3" in capsys.readouterr().err
    assert (
        main(
            ["monitor", "profile", "nope", "--model-repository", str(tmp_path), "--data", str(data)]
        )
        == 2
    )
    assert "no such model folder" in capsys.readouterr().err
