"""``inferd perf``'s command line: perf_analyzer's flags and meanings, refusals by name, one-line
errors with exit code 2, an unreachable server with exit code 3, every option read."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import socket
from pathlib import Path

import pytest

import inferd
from inferd.cli.main import build_parser, main
from inferd.cli.perf_args import options_from_args
from inferd.cli.perf_flags import REFUSED
from inferd.tools.perf.options import Distribution, LoadMode, PerfOptions

SRC = Path(inferd.__file__).parent


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["perf", *argv])


def test_perf_analyzers_flags_keep_their_meaning() -> None:
    argv = "-m simple -x 2 -b 4 -p 750 -s 5 -r 7 --percentile 95 --concurrency-range 1:8:2"
    argv += " -f out.csv --shape IN:3,4 -z -l 20"
    opts = options_from_args(_args(*argv.split()))
    assert opts.model == "simple"
    assert opts.version == "2"
    assert opts.transport == "http-binary"
    assert opts.url == "localhost:8000"
    assert opts.batch_size == 4
    assert opts.measurement_interval_ms == 750  # -p is the window, as in perf_analyzer
    assert opts.stability_percentage == 5
    assert opts.max_trials == 7
    assert opts.percentile == 95
    assert opts.load_levels() == [1, 3, 5, 7]
    assert opts.csv_file == Path("out.csv")
    assert opts.shapes == (("IN", (3, 4)),)
    assert opts.input_data == ("zero",)
    assert opts.latency_threshold_ms == 20


def test_protocols_pick_their_transport_and_default_port() -> None:
    assert options_from_args(_args("-m", "m", "-i", "gRPC")).url == "localhost:8001"
    assert options_from_args(_args("-m", "m", "-i", "grpc", "--streaming")).transport == (
        "grpc-stream"
    )
    assert options_from_args(_args("-m", "m", "--json")).transport == "http-json"
    assert options_from_args(_args("-m", "m", "--input-tensor-format", "json")).transport == (
        "http-json"
    )
    local = options_from_args(_args("-m", "m", "-i", "in-process", "--model-repository", "r"))
    assert local.transport == "in-process"
    assert local.url == ""


def test_open_loop_options(tmp_path: Path) -> None:
    argv = "-m m --request-rate-range 100:300:100 --request-distribution poisson --seed 3"
    rate = options_from_args(_args(*argv.split()))
    assert rate.mode is LoadMode.REQUEST_RATE
    assert rate.distribution is Distribution.POISSON
    assert rate.load_levels() == [100, 200, 300]
    assert rate.seed == 3
    intervals = tmp_path / "gaps.txt"
    intervals.write_text("100\n200\n")
    opts = options_from_args(_args("-m", "m", "--request-intervals", str(intervals)))
    assert opts.mode is LoadMode.INTERVALS
    assert opts.intervals_us == (100.0, 200.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--streaming"], "--streaming needs -i grpc"),
        (["-i", "grpc", "--json"], "need -i http"),
        (["--output-tensor-format", "json"], "must match the input format"),
        (["-i", "in-process"], "go together"),
        (["--model-repository", "r"], "go together"),
        (["--concurrency-range", "2", "--request-rate-range", "5"], "cannot be combined"),
        (["--request-distribution", "poisson"], "applies to --request-rate-range only"),
        (["--concurrency-range", "0:4"], "must start above 0"),
        (["--request-rate-range", "x"], "must be numbers"),
        (["--percentile", "100"], "between 1 and 99"),
        (["--service-kind", "torchserve"], "--service-kind torchserve is not supported"),
        (["-z", "--input-data", "random"], "cannot be combined"),
        (["--shape", "nonsense"], "expected NAME:D1,D2"),
    ],
)
def test_contradictory_options_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["perf", "-m", "simple", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("inferd perf: error: ")
    assert "Traceback" not in err


@pytest.mark.parametrize(("flags", "takes_value", "advice"), REFUSED)
def test_unsupported_perf_analyzer_flags_are_refused_by_name(
    flags: tuple[str, ...], takes_value: bool, advice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["perf", "-m", "simple", flags[0], *(["1"] if takes_value else [])]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"perf_analyzer's {flags[0]} is not supported by inferd perf: {advice}" in err


def test_a_server_that_does_not_answer_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port that is bound but never listens: refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        code = main(["perf", "-m", "simple", "-i", "grpc", "-u", f"127.0.0.1:{port}", "-q"])
    assert code == 3
    assert "inferd perf: error: " in capsys.readouterr().err


def test_a_baseline_that_is_not_json_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "base.json"
    bad.write_text("not json")
    assert main(["perf", "-m", "simple", "--baseline", str(bad)]) == 2
    assert "is not JSON" in capsys.readouterr().err
    assert main(["perf", "-m", "simple", "--baseline", str(tmp_path / "none.json")]) == 2
    assert "cannot read the baseline" in capsys.readouterr().err


def _attributes_read(paths: list[Path]) -> set[str]:
    read: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                read.add(node.attr)
    return read


def test_every_perf_flag_and_option_is_read() -> None:
    perf = next(
        a.choices["perf"]
        for a in build_parser()._actions
        if isinstance(a, argparse._SubParsersAction)
    )
    cli_read = _attributes_read(
        [
            SRC / "cli" / name
            for name in (
                "perf.py",
                "perf_args.py",
                "perf_mlperf.py",
                "perf_connection.py",
                "perf_llm.py",
            )
        ]
    )
    dests = {
        a.dest
        for a in perf._actions
        if a.dest not in ("help",) and not a.dest.startswith("refused_")
    }
    # --sync and --async are accepted for scripts' sake: a context always awaits each answer
    assert dests - cli_read - {"sync", "async_mode"} == set()
    tools_read = _attributes_read(sorted((SRC / "tools" / "perf").glob("*.py")))
    fields = {f.name for f in dataclasses.fields(PerfOptions)}
    assert fields - tools_read - cli_read == set()
