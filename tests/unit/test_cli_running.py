"""``inferd.cli.running`` and ``inferd.cli.common_args``: what analyze and optimize (and perf)
share: the results flags, running the work, and what an error does to the progress display and
the exit status."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from inferd.cli.common_args import results_group
from inferd.cli.running import CommandExit, run_async, run_reported
from inferd.errors import InvalidArgumentError, LoadFailedError


class _Reporter:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def close(self) -> None:
        self.log.append("closed")


async def _answer() -> int:
    return 42


async def _raise(exc: BaseException) -> int:
    raise exc


def test_run_async_returns_the_coroutines_result() -> None:
    assert run_async(_answer()) == 42


def test_a_finished_run_closes_the_reporter_and_prints_nothing() -> None:
    log: list[str] = []
    assert run_reported(_answer(), _Reporter(log), log.append, interrupted="x", failed=1) == 42
    assert log == ["closed"]


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (InvalidArgumentError("--budget must be above 0"), 2, "--budget must be above 0"),
        (LoadFailedError("model 'm' did not load"), 7, "model 'm' did not load"),
        (KeyboardInterrupt(), 130, "interrupted: nothing changed"),
    ],
)
def test_an_error_closes_the_reporter_then_prints_one_line(
    exc: BaseException, code: int, line: str
) -> None:
    log: list[str] = []
    with pytest.raises(CommandExit) as caught:
        run_reported(
            _raise(exc), _Reporter(log), log.append, interrupted="interrupted: nothing changed",
            failed=7,
        )  # fmt: skip
    assert caught.value.code == code
    assert log == ["closed", line]  # the bar is gone before the line is printed


def test_an_error_outside_inferds_tree_is_not_swallowed() -> None:
    log: list[str] = []
    with pytest.raises(ZeroDivisionError):
        run_reported(
            _raise(ZeroDivisionError()), _Reporter(log), log.append, interrupted="", failed=1
        )
    assert log == []


def test_the_results_group_opens_with_results_and_closes_with_quiet() -> None:
    parser = argparse.ArgumentParser(prog="x")
    with results_group(parser, default=Path("out"), help="where it goes") as out:
        out.add_argument("--apply", action="store_true", help="apply it")
    (group,) = [g for g in parser._action_groups if g.title == "results"]
    flags = [action.option_strings[0] for action in group._group_actions]
    assert flags == ["--results", "--apply", "--quiet"]
    assert parser.parse_args([]) == argparse.Namespace(
        results=Path("out"), apply=False, quiet=False
    )
    given = parser.parse_args(["--results", "r", "--quiet"])
    assert given.results == Path("r")
    assert given.quiet
    assert "where it goes" in parser.format_help()
