"""``inferd perf -i openai``'s flags: read into the options, or refused by name (exit 2) when
they cannot work together; nothing is accepted and then ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.cli.main import build_parser, main
from inferd.cli.perf_args import options_from_args
from inferd.tools.perf.llm_inputs import EndpointType


def test_the_flags_reach_the_options(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "perf", "-i", "openai", "--model", "llm", "--endpoint-type", "completions",
            "--streaming", "--synthetic-input-tokens-mean", "30",
            "--synthetic-input-tokens-stddev", "4", "--output-tokens-mean", "16",
            "--output-tokens-stddev", "2", "--num-prompts", "7", "--use-server-token-count",
            "--tokenizer", str(tmp_path),
        ]
    )  # fmt: skip
    options = options_from_args(args)
    assert options.transport == "openai"
    assert options.model == "llm"
    assert options.url == "localhost:8000"
    llm = options.llm
    assert llm is not None
    assert llm.endpoint is EndpointType.COMPLETIONS
    assert llm.streaming
    assert (llm.input_tokens_mean, llm.input_tokens_stddev) == (30, 4.0)
    assert (llm.output_tokens_mean, llm.output_tokens_stddev) == (16, 2.0)
    assert llm.num_prompts == 7
    assert llm.server_token_count
    assert llm.tokenizer == tmp_path


def test_defaults_are_chat_whole_answers_and_synthetic_prompts() -> None:
    options = options_from_args(build_parser().parse_args(["perf", "-i", "openai", "-m", "x"]))
    assert options.llm is not None
    assert options.llm.endpoint is EndpointType.CHAT
    assert not options.llm.streaming
    assert options.llm.input_file is None
    assert options.llm.output_tokens_mean is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--endpoint-type", "chat"], "--endpoint-type needs -i openai"),
        (["--tokenizer", "t"], "--tokenizer needs -i openai"),
        (["-i", "openai", "-b", "4"], "-b is for tensor models"),
        (["-i", "openai", "--input-data", "zero"], "--input-data is for tensor models"),
        (["-i", "openai", "--shape", "x:1"], "--shape is for tensor models"),
        (
            ["-i", "openai", "--input-file", "p.jsonl", "--synthetic-input-tokens-mean", "5"],
            "--synthetic-input-tokens-mean makes synthetic prompts",
        ),
        (
            ["-i", "openai", "--output-tokens-stddev", "3"],
            "--output-tokens-stddev needs --output-tokens-mean",
        ),
        (
            ["-i", "openai", "--endpoint-type", "embeddings", "--streaming"],
            "--streaming does not apply to --endpoint-type embeddings",
        ),
        (
            ["-i", "openai", "--endpoint-type", "embeddings", "--output-tokens-mean", "4"],
            "--output-tokens-mean does not apply",
        ),
        (["-i", "openai", "--binary"], "need -i http"),
        (["-i", "openai", "--scenario", "offline"], "--scenario measures tensor models"),
        (
            ["-i", "openai", "--input-file", "/no/such/prompts.jsonl", "-u", "localhost:1"],
            "cannot read the input file",
        ),
    ],
)
def test_flags_that_cannot_work_are_refused_by_name(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["perf", "-m", "llm", *argv]) == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_server_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    # port 1: nothing listens there
    assert main(["perf", "-i", "openai", "-m", "llm", "-u", "127.0.0.1:1", "-q"]) == 3
    assert "cannot connect to 127.0.0.1:1" in capsys.readouterr().err
