"""A command whose extra is not installed says which ``pip install`` to run, before any work."""

from __future__ import annotations

import importlib.util

import pytest

from inferd.cli.extras import missing_extra
from inferd.cli.main import main


def test_installed_modules_need_nothing() -> None:
    assert missing_extra("perf", ("json", "numpy")) is None


def test_a_missing_module_names_the_extra() -> None:
    message = missing_extra("analyze", ("json", "no_such_module_here"))
    assert message == "needs no_such_module_here: pip install 'inferd[analyze]'"


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["perf", "-m", "simple"], "perf"),
        (["analyze", "simple", "--model-repository", "examples/models"], "analyze"),
    ],
)
def test_a_command_without_its_extra_stops_with_one_line(
    argv: list[str], extra: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "rich" else real(name, *a)
    )
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"needs rich: pip install 'inferd[{extra}]'")
    assert len(err.splitlines()) == 1
