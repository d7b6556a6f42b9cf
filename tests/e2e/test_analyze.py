"""``inferd analyze`` end to end: the command starts its own server, loads each candidate through
the model control API, measures it with inferd perf, and writes a config that a fresh
``inferd serve`` loads and answers with; a rerun resumes; a running server is analyzed over gRPC
and left as its repository says."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import running_server
from tests.helpers.signals import ctrl_c_reachable

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
# a tiny grid: 1 or 2 instances with the dynamic batcher (2 configs besides the model's own),
# two load points, short windows
TINY = [
    "--instances", "1,2",
    "--dynamic-batching", "on",
    "--max-batch-sizes", "8",
    "--queue-delays-us", "100",
    "--threads", "auto",
    "--concurrency", "1,2",
    "--measurement-interval", "200",
    "--max-trials", "3",
    "--confirm", "0",
]  # fmt: skip


def analyze(*args: str | Path, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "analyze", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_analyze_writes_a_config_that_serves_and_a_rerun_resumes(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "tuned"
    command = ["simple", "--model-repository", EXAMPLES, *TINY, "--confirm", "1",
               "--results", results, "--output-repository", out]  # fmt: skip
    first = analyze(*command)
    assert first.returncode == 0, first.stderr + first.stdout
    assert "simple: 2 configurations in the space; grid search" in first.stdout
    lines = (results / "measurements.jsonl").read_text().splitlines()
    keys = [json.loads(line)["key"] for line in lines]
    # the search, then the default and the better of the two measured again
    assert keys[:4] == ["default", "i1-b8-q100", "i2-b8-q100", "default"]
    assert keys[4] in ("i1-b8-q100", "i2-b8-q100")
    assert [json.loads(line)["repeat"] for line in lines] == [0, 0, 0, 1, 1]
    for line in lines:
        entry = json.loads(line)
        assert entry["error"] is None
        assert [p["concurrency"] for p in entry["points"]] == [1, 2]
        assert all(p["throughput"] > 0 for p in entry["points"])
        assert entry["memory_mb"] > 10
    with (results / "results.csv").open() as text:
        rows = list(csv.DictReader(text))
    assert len(rows) == 6  # the rounds of a config are combined into one
    assert sum(row["best"] == "True" for row in rows) == 2  # the best config's two load points
    runs = {row["config"]: row["runs"] for row in rows}
    assert runs["default"] == runs[keys[4]] == "2"
    best_key = next(row["config"] for row in rows if row["best"] == "True")
    assert best_key in ("default", keys[4])  # chosen among the confirmed
    report = (results / "report.html").read_text()
    assert "Pareto front" in report
    assert "Plotly" in report
    written = (out / "simple" / "config.pbtxt").read_text()
    assert written.startswith("# Chosen by `inferd analyze` for throughput")

    again = analyze(*command)
    assert again.returncode == 0, again.stderr + again.stdout
    assert "resuming: 3 configuration(s) of 'simple'" in again.stdout
    assert (results / "measurements.jsonl").read_text().splitlines() == lines

    with running_server([out]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = httpclient.InferInput(name, [1, 16], "INT32")
            tensor.set_data_from_numpy(data)
            inputs.append(tensor)
        result = client.infer("simple", inputs)
        assert np.array_equal(result.as_numpy("OUTPUT0"), data * 2)
        config = client.get_model_config("simple")
        best = json.loads(lines[keys.index(best_key)])["candidate"]
        assert config["instance_group"][0]["count"] == best["instances"]
        client.close()


def test_analyze_a_running_server_over_grpc_and_leave_it_as_it_was(tmp_path: Path) -> None:
    args = ["--model-control-mode", "explicit", "--load-model", "simple"]
    with running_server([EXAMPLES], args) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        before = client.get_model_config("simple", as_json=True)["config"]
        run = analyze(
            "simple", "--model-repository", EXAMPLES, "-u", server.grpc_url, "-i", "grpc",
            *TINY, "--instances", "3", "--results", tmp_path / "r",
        )  # fmt: skip
        assert run.returncode == 0, run.stderr + run.stdout
        stored = (tmp_path / "r" / "measurements.jsonl").read_text().splitlines()
        keys = [json.loads(line)["key"] for line in stored]
        assert keys == ["default", "i3-b8-q100"]
        after = client.get_model_config("simple", as_json=True)["config"]
        assert after["instance_group"] == before["instance_group"]
        assert "dynamic_batching" not in after
        client.close()


def test_ctrl_c_keeps_what_was_measured_and_the_rerun_resumes(tmp_path: Path) -> None:
    results = tmp_path / "results"
    command = [sys.executable, "-m", "inferd.cli.main", "analyze", "simple",
               "--model-repository", str(EXAMPLES), *TINY, "--results", str(results)]  # fmt: skip
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_reachable,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("simple default:"):
            process.send_signal(signal.SIGINT)  # as Ctrl-C does
            break
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "interrupted; the measurements so far are kept in" in err
    kept = (results / "measurements.jsonl").read_text().splitlines()
    assert 1 <= len(kept) < 3
    rerun = analyze(*command[4:])
    assert rerun.returncode == 0, rerun.stderr + rerun.stdout
    assert f"resuming: {len(kept)} configuration(s) of 'simple'" in rerun.stdout
    lines = (results / "measurements.jsonl").read_text().splitlines()
    assert lines[: len(kept)] == kept
    assert sorted(json.loads(line)["key"] for line in lines) == [
        "default",
        "i1-b8-q100",
        "i2-b8-q100",
    ]


def test_two_models_one_after_the_other_in_process(tmp_path: Path) -> None:
    results = tmp_path / "results"
    run = analyze(
        "simple", "digits", "--model-repository", EXAMPLES, "-i", "in-process", *TINY,
        "--instances", "1", "--dynamic-batching", "off", "--results", results,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    stored = (results / "measurements.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in stored]
    assert [(e["model"], e["key"]) for e in entries] == [
        ("simple", "default"),
        ("simple", "i1-b8-off"),
        ("digits", "default"),
        ("digits", "i1-b32-off"),
    ]
    assert (results / "configs" / "simple" / "config.pbtxt").is_file()
    assert (results / "configs" / "digits" / "config.pbtxt").is_file()
    report = (results / "report.html").read_text()
    assert "<h2>Model simple</h2>" in report
    assert "<h2>Model digits</h2>" in report


@pytest.mark.parametrize(
    ("model", "message"),
    [("digits_pipeline", "is an ensemble"), ("repeat_int32", "is decoupled")],
)
def test_models_the_search_does_not_describe_are_refused(
    model: str, message: str, tmp_path: Path
) -> None:
    run = analyze(model, "--model-repository", EXAMPLES, "-i", "in-process", *TINY,
                  "--results", tmp_path / "r")  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.startswith(f"inferd analyze: error: model '{model}' {message}")
    assert not (tmp_path / "r" / "measurements.jsonl").exists()
