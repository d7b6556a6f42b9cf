"""The ``digits_pipeline`` example ensemble and its client, unmodified, against ``inferd serve``
on the example repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tritonclient.http as httpclient

from inferd.testing import ServerProcess

CLIENT = Path(__file__).parents[2] / "examples" / "clients" / "digits_pipeline.py"


def test_the_pipeline_client_reads_held_out_digits(server: ServerProcess) -> None:
    for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
        done = subprocess.run(
            [sys.executable, str(CLIENT), "--protocol", protocol, "--url", url, "--batch", "8"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr + done.stdout
        lines = done.stdout.splitlines()
        assert len(lines) == 8
        assert all(line.endswith(": ok") for line in lines)


def test_the_pipeline_counts_its_steps(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config("digits_pipeline")
    assert [s["model_name"] for s in config["ensemble_scheduling"]["step"]] == [
        "digits_preprocess",
        "digits",
        "digits_postprocess",
    ]
    stats = client.get_inference_statistics("digits_pipeline")["model_stats"][0]
    assert stats["inference_count"] >= 16  # the two batches of 8 sent above
    post = client.get_inference_statistics("digits_postprocess")["model_stats"][0]
    assert post["inference_count"] >= stats["inference_count"]
