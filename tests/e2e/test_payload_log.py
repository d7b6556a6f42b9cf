"""``inferd serve --payload-log``: requests sent with tritonclient over HTTP and gRPC (and through
the streaming entries) appear in the model's JSONL files with their inputs and outputs, a
redacted input never does, models left out write nothing, and the counters show on the metrics
port."""

from __future__ import annotations

import json
import queue
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import running_server

pytestmark = pytest.mark.e2e


def _metric(url: str, line_start: str) -> float:
    text = urllib.request.urlopen(f"http://{url}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_requests_are_logged_with_redaction_and_counted(example_repo: Path, tmp_path: Path) -> None:
    logs = tmp_path / "payloads"
    args = [
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--load-model=simple_identity",
        f"--payload-log={logs}",
        "--payload-log-models=simple",
        "--payload-log-redact=INPUT1",
        "--payload-log-rate=1",
    ]
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 7919, dtype=np.int32)  # a value that appears nowhere else
    with running_server([example_repo], args) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        for i in range(3):
            inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32")]
            inputs.append(httpclient.InferInput("INPUT1", [1, 16], "INT32"))
            inputs[0].set_data_from_numpy(a + i)
            inputs[1].set_data_from_numpy(b, binary_data=True)
            http.infer("simple", inputs, request_id=f"http-{i}")
        g = [grpcclient.InferInput("INPUT0", [1, 16], "INT32")]
        g.append(grpcclient.InferInput("INPUT1", [1, 16], "INT32"))
        g[0].set_data_from_numpy(a)
        g[1].set_data_from_numpy(b)
        grpc.infer("simple", g, request_id="grpc-0")
        text = np.array([[b"hello"]], dtype=object)
        t = httpclient.InferInput("INPUT0", [1, 1], "BYTES")
        t.set_data_from_numpy(text)
        http.infer("simple_identity", [t])  # a model left out of the log
        requests_metric = 'inferd_payload_log_requests_total{model="simple"}'
        deadline = time.monotonic() + 20
        while _metric(server.metrics_url, requests_metric) < 4:
            assert time.monotonic() < deadline, server.log_tail()
            time.sleep(0.1)
        assert _metric(server.metrics_url, "inferd_payload_log_files_total") == 1
        assert _metric(server.metrics_url, "inferd_payload_log_bytes_total") > 0
        dropped = 'inferd_payload_log_dropped_total{model="simple",reason="queue_full"}'
        assert _metric(server.metrics_url, dropped) == 0
        http.close()
        grpc.close()
    assert [p.name for p in logs.iterdir()] == ["simple"]
    (path,) = (logs / "simple").glob("*.jsonl")
    assert b"7919,7919" not in path.read_bytes()  # INPUT1 itself, never written
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in records] == ["http-0", "http-1", "http-2", "grpc-0"]
    for i, record in enumerate(records):
        assert (record["model"], record["version"]) == ("simple", 1)
        given, redacted = record["inputs"]
        assert given == {
            "name": "INPUT0",
            "datatype": "INT32",
            "shape": [1, 16],
            "data": (a + (i % 3)).reshape(-1).tolist(),
        }
        assert redacted == {"name": "INPUT1", "redacted": True}
        sums = {o["name"]: o["data"] for o in record["outputs"]}
        assert sums["OUTPUT0"] == (a + (i % 3) + b).reshape(-1).tolist()
        assert sums["OUTPUT1"] == (a + (i % 3) - b).reshape(-1).tolist()


def test_payload_log_options_without_the_folder_are_refused(example_repo: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "inferd.cli.main",
            "serve",
            "--model-repository",
            str(example_repo),
            "--payload-log-rate=0.5",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--payload-log-rate needs --payload-log DIR" in done.stderr


def test_requests_through_the_streaming_entries_are_logged(
    example_repo: Path, tmp_path: Path
) -> None:
    """An ordinary model answers a gRPC ModelStreamInfer request and HTTP generate /
    generate_stream once, through the engine's infer: each is one record, like any request."""
    logs = tmp_path / "payloads"
    args = ["--model-control-mode=explicit", "--load-model=simple", f"--payload-log={logs}"]
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    with running_server([example_repo], args) as server:
        answers: queue.Queue[Any] = queue.Queue()
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        grpc.start_stream(callback=lambda result, error: answers.put(error or result))
        inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for item in inputs:
            item.set_data_from_numpy(a)
        grpc.async_stream_infer("simple", inputs, request_id="stream-0")
        assert answers.get(timeout=30).as_numpy("OUTPUT0").tolist() == (2 * a).tolist()
        grpc.stop_stream()
        grpc.close()
        body = {"INPUT0": list(range(16)), "INPUT1": [1] * 16}
        with httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as http:
            for route in ("generate", "generate_stream"):
                reply = http.post(f"/v2/models/simple/{route}", json={"id": route, **body})
                assert reply.status_code == 200, reply.text
    (path,) = (logs / "simple").glob("*.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == ["generate", "generate_stream", "stream-0"]
    by_id = {r["id"]: r for r in records}
    assert by_id["stream-0"]["outputs"][0]["data"] == (2 * a).reshape(-1).tolist()
    assert by_id["generate"]["inputs"][1]["data"] == [1] * 16


def test_the_byte_cap_keeps_the_logs_folder_small_and_the_newest_records(
    example_repo: Path, tmp_path: Path
) -> None:
    """``--payload-log-max-bytes``: past the cap the oldest files go (counted on the metrics
    port); the newest records and a file of the operator's in the folder stay."""
    logs = tmp_path / "payloads"
    (logs / "simple").mkdir(parents=True)
    notes = logs / "simple" / "README.txt"
    notes.write_text("the operator's")
    cap = 4096
    args = [
        "--model-control-mode=explicit",
        "--load-model=simple",
        f"--payload-log={logs}",
        "--payload-log-rotate-bytes=1024",
        f"--payload-log-max-bytes={cap}",
    ]
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    with running_server([example_repo], args) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        for i in range(40):
            inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
            for item in inputs:
                item.set_data_from_numpy(a + i)
            http.infer("simple", inputs, request_id=f"r{i}")
        deadline = time.monotonic() + 20
        while _metric(server.metrics_url, 'inferd_payload_log_requests_total{model="simple"}') < 40:
            assert time.monotonic() < deadline, server.log_tail()
            time.sleep(0.1)
        deleted = 'inferd_payload_log_deleted_files_total{reason="max_bytes"}'
        assert _metric(server.metrics_url, deleted) > 0
        assert _metric(server.metrics_url, "inferd_payload_log_disk_bytes") <= cap + 1024 + 1024
        http.close()
    files = sorted((logs / "simple").glob("*.jsonl"))
    assert sum(p.stat().st_size for p in files) <= cap
    records = [json.loads(line) for p in files for line in p.read_text().splitlines()]
    assert records[-1]["id"] == "r39"
    assert [r["id"] for r in records] == [f"r{i}" for i in range(40 - len(records), 40)]
    assert len(records) < 40
    assert notes.read_text() == "the operator's"
