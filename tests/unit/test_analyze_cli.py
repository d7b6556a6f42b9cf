"""``inferd analyze``'s command line: bad input is one clear line and exit code 2, before any
server starts; the help explains the flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.cli.main import main
from inferd.tools.analyze.store import ResultStore

EXAMPLES = str(Path(__file__).resolve().parents[2] / "examples" / "models")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--concurrency", "0"], "--concurrency: 0 is below the minimum of 1"),
        (["--instances", "two"], "--instances: 'two' is not a whole number"),
        (["--threads", "auto,x"], "--threads: 'x' is not a whole number"),
        (["--dynamic-batching", "sometimes"], "'sometimes' is neither on nor off"),
        (["-i", "in-process", "-u", "localhost:8000"], "leave out -u"),
        (["--metrics-url", "localhost:8002"], "--metrics-url is for a server given with -u"),
        (["--apply", "--output-repository", "x"], "not both"),
        (["--output-repository", EXAMPLES], "use --apply"),
        (["--max-trials", "2"], "at least 3"),
        (["--latency-budget-ms", "-1"], "--latency-budget-ms must be above 0"),
        (["--budget", "0"], "--budget must be above 0"),
        (["--shape", "INPUT0"], "shape"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["analyze", "simple", "--model-repository", EXAMPLES, "--results", str(tmp_path)]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("inferd analyze: error: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_an_unknown_model_or_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["analyze", "nope", "--model-repository", EXAMPLES, "--results", str(tmp_path)]) == 2
    )
    assert "model 'nope' has no directory in" in capsys.readouterr().err
    missing = str(tmp_path / "missing")
    assert main(["analyze", "simple", "--model-repository", missing]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_results_measured_with_other_settings_are_not_mixed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ResultStore(tmp_path, {"concurrency": [7]})
    argv = ["analyze", "simple", "--model-repository", EXAMPLES, "--results", str(tmp_path)]
    assert main(argv) == 2
    assert "holds results measured with other settings (" in capsys.readouterr().err


def test_help_names_the_search_space_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    text = capsys.readouterr().out
    for flag in ("--latency-budget-ms", "--search", "--budget", "--queue-delays-us",
                 "--preferred-batch-sizes", "--threads", "--results", "--apply",
                 "--output-repository", "--measurement-interval", "exit codes"):  # fmt: skip
        assert flag in text
