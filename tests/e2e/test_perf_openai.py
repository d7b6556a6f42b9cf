"""``inferd perf -i openai``: LLM load on ``inferd serve``'s ``/v1`` API, as a user runs it (a
subprocess, short windows), with the CSV and JSON read back.

The server serves tests/data/triton_openai's ``echo_llm`` (a decoupled model that answers with
the words of its prompt, one streamed response per word) with a word-level tokenizer and a chat
template built here, so the tokens perf counts with the same tokenizer can be checked against
the server's own usage. Embeddings run against the example embedding model when PyTorch can
build it.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from inferd.testing import ServerProcess, running_server
from inferd.tools.perf.llm_inputs import WORDS
from inferd.tools.perf.report import llm_csv_header

pytestmark = pytest.mark.e2e

DATA = Path(__file__).resolve().parent.parent / "data" / "triton_openai"
TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}> {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
SHORT = ["-p", "300", "-r", "3", "-s", "1000", "-q"]  # 3 windows of 300 ms, all reported
CONCURRENCY = 2
PROMPT_TOKENS = 8


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("perf_openai")
    repo = root / "models"
    shutil.copytree(DATA, repo, ignore=shutil.ignore_patterns("ruff.toml", "__pycache__"))
    config = repo / "echo_llm" / "config.pbtxt"
    markers = root / "markers"
    markers.mkdir()
    config.write_text(config.read_text().replace("MARKER_DIR", str(markers)))
    # a word-level tokenizer knowing the synthetic prompts' words
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(WORDS, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tokenizer.save(str(repo / "echo_llm" / "tokenizer.json"))
    settings = {"chat_template": TEMPLATE, "bos_token": "<s>", "eos_token": "</s>"}
    (repo / "echo_llm" / "tokenizer_config.json").write_text(json.dumps(settings))
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo], ["--openai-max-tokens=64"]) as proc:
        yield proc


def perf(*argv: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "perf", "-i", "openai", *argv],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == expect, done.stdout + done.stderr
    return done


def read(tmp_path: Path) -> tuple[dict[str, str], list[str], dict[str, Any]]:
    with (tmp_path / "out.csv").open() as f:
        header = next(csv.reader(f))
    with (tmp_path / "out.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    return row, header, json.loads((tmp_path / "out.json").read_text())


def outputs(server: ServerProcess, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "-m", "echo_llm", "-u", server.http_url, *SHORT, "--concurrency-range",
        str(CONCURRENCY), "-f", str(tmp_path / "out.csv"),
        "--json-output", str(tmp_path / "out.json"), *extra,
    ]  # fmt: skip


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "whole"])
def test_llm_figures_over_chat_and_completions(
    server: ServerProcess, repo: Path, tmp_path: Path, endpoint: str, streaming: bool
) -> None:
    done = perf(
        *outputs(server, tmp_path),
        "--endpoint-type", endpoint, *(["--streaming"] if streaming else []),
        "--synthetic-input-tokens-mean", str(PROMPT_TOKENS), "--num-prompts", "10",
        "--tokenizer", str(repo / "echo_llm"),
    )  # fmt: skip
    row, header, document = read(tmp_path)
    assert header[-len(llm_csv_header()) :] == llm_csv_header()
    (point,) = document["points"]
    llm = point["llm"]
    assert document["settings"]["transport"] == "openai"
    assert document["settings"]["llm"]["endpoint_type"] == endpoint
    assert document["settings"]["llm"]["streaming"] is streaming
    count = point["request_count"]
    assert count > 0
    assert point["error_count"] == 0
    assert row["Failed Requests"] == "0"
    assert llm["request_count"] == count
    assert llm["requests_per_s"] == pytest.approx(count / point["duration_s"])
    assert float(row["Requests/Second"]) == pytest.approx(llm["requests_per_s"], rel=1e-4)
    # the tokenizer counts the prompts exactly; echo_llm answers with the prompt's words
    assert llm["avg_input_tokens"] == PROMPT_TOKENS
    # chat: the template's "<user>" and "<assistant>" are 3 tokens each ("<", word, ">")
    expected_output = PROMPT_TOKENS + (6 if endpoint == "chat" else 0)
    assert llm["avg_output_tokens"] == expected_output
    assert llm["output_tokens_per_s"] == pytest.approx(
        expected_output * llm["requests_per_s"], rel=1e-6
    )
    ttft, latency = llm["ttft_us"], llm["latency_us"]
    assert 0 < ttft["p50"] <= ttft["p90"] <= ttft["p99"]
    for p in ("p50", "p90", "p99"):
        assert ttft[p] <= latency[p]
    assert int(row["p50 Time To First Token"]) <= int(row["p50 Request Latency"])
    if streaming:
        assert 0 < llm["itl_us"]["p50"] <= llm["itl_us"]["p99"]
        assert int(row["p99 Inter Token Latency"]) >= 0
    else:  # a whole answer: its first token comes with its end, no inter-token latency
        assert ttft == latency
        assert llm["itl_us"] is None
        assert row["p50 Inter Token Latency"] == ""
    assert llm["output_tokens_per_s_per_request"]["p50"] > 0
    assert "TTFT p50" in done.stdout
    assert "input tokens counted with the tokenizer" in done.stdout


def test_server_token_count_reads_usage_from_the_last_chunk(
    server: ServerProcess, tmp_path: Path
) -> None:
    done = perf(
        *outputs(server, tmp_path),
        "--endpoint-type", "completions", "--streaming", "--use-server-token-count",
        "--synthetic-input-tokens-mean", "12", "--output-tokens-mean", "5",
    )  # fmt: skip
    _, _, document = read(tmp_path)
    llm = document["points"][0]["llm"]
    # max_tokens 5 cuts the 12-word echo: the server's usage says 5
    assert llm["avg_output_tokens"] == 5
    assert llm["avg_input_tokens"] == 12  # whitespace words: no --tokenizer
    assert "output tokens counted by the server" in done.stdout
    assert "input tokens approximated by whitespace-separated words" in done.stdout


def test_prompts_from_a_jsonl_file(server: ServerProcess, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    lines = [{"text": "one two three"}, {"messages": [{"role": "user", "content": "a b c d"}]}]
    prompts.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    perf(*outputs(server, tmp_path), "--streaming", "--input-file", str(prompts))
    _, _, document = read(tmp_path)
    llm = document["points"][0]["llm"]
    assert 3 <= llm["avg_input_tokens"] <= 4
    assert document["settings"]["llm"]["input_file"] == str(prompts)


def test_an_unknown_model_is_an_error_row_not_a_crash(
    server: ServerProcess, tmp_path: Path
) -> None:
    args = outputs(server, tmp_path, "--endpoint-type", "completions", "--streaming")
    args[1] = "no_such_model"
    done = perf(*args, expect=3)
    row, _, document = read(tmp_path)
    (point,) = document["points"]
    assert point["request_count"] == 0
    assert point["error_count"] > 0
    assert row["Failed Requests"] == str(point["error_count"])
    assert row["Requests/Second"] == "0"
    assert row["p50 Time To First Token"] == ""
    assert "404" in point["errors"][0]
    assert "no_such_model" in point["errors"][0]
    assert "does not list the model 'no_such_model'" in done.stdout
    assert "every request failed at concurrency 2" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_embeddings(embedding_repo: Path, tmp_path: Path) -> None:
    from tests.helpers.embeddings import MODEL

    with running_server([embedding_repo], []) as proc:
        args = outputs(proc, tmp_path, "--endpoint-type", "embeddings")
        args[1] = MODEL
        perf(*args, "--synthetic-input-tokens-mean", "16")
    row, _, document = read(tmp_path)
    llm = document["points"][0]["llm"]
    assert llm["request_count"] > 0
    assert row["Failed Requests"] == "0"
    assert llm["avg_input_tokens"] == 16
    assert llm["avg_output_tokens"] == 0
    assert llm["ttft_us"] == llm["latency_us"]
    assert llm["itl_us"] is None
