"""The response cache on an ensemble and on models that models call, end to end: ``inferd serve
--cache-config`` with the ``digits_pipeline`` example ensemble and its three step models, and
the ``bls_router`` Python model calling ``simple``, driven by tritonclient.

The ensemble enables the cache (top-level caching: a hit answers without running any step), and
so does its classifier step ``digits`` (a step's own cache answers the step, whatever the
ensemble's request was). Statistics count hits and misses as Triton counts them for an ensemble;
``/metrics`` has cache counters for ``digits`` and none for the ensemble, as Triton reports.
A business-logic call of ``simple``, which enables the cache, is answered from it.
"""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, running_server

pytestmark = pytest.mark.e2e

PIPELINE = ("digits_pipeline", "digits_preprocess", "digits", "digits_postprocess")
CACHED = ("digits_pipeline", "digits", "simple")


@pytest.fixture(scope="module")
def server(example_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    repo = tmp_path_factory.mktemp("ensemble_cache")
    for name in (*PIPELINE, "simple", "bls_router"):
        shutil.copytree(example_repo / name, repo / name)
    for name in CACHED:
        config = repo / name / "config.pbtxt"
        config.write_text(config.read_text() + "\nresponse_cache { enable: true }\n")
    with running_server([repo], ["--cache-config", "local,size=1048576"]) as proc:
        yield proc


def _counts(client: httpclient.InferenceServerClient, model: str) -> dict[str, int]:
    entry = client.get_inference_statistics(model)["model_stats"][0]
    phases = entry["inference_stats"]
    out = {phase: int(phases[phase]["count"]) for phase in phases}
    out["executions"] = int(entry["execution_count"])
    out["inferences"] = int(entry["inference_count"])
    return out


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def _read(client: httpclient.InferenceServerClient, image: np.ndarray[Any, Any]) -> Any:
    tensor = httpclient.InferInput("image", list(image.shape), "UINT8")
    tensor.set_data_from_numpy(image)
    result = client.infer("digits_pipeline", [tensor])
    return result.as_numpy("digit"), result.as_numpy("confidence")


def test_an_ensemble_hit_runs_no_step_and_a_step_has_its_own_cache(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        image = np.zeros((1, 8, 8), np.uint8)
        image[0, 2:6, 3:5] = 255
        before = {name: _counts(client, name) for name in PIPELINE}
        first = _read(client, image)
        second = _read(client, image)
        after = {name: _counts(client, name) for name in PIPELINE}
        np.testing.assert_array_equal(first[0], second[0])
        np.testing.assert_array_equal(first[1], second[1])
        # the ensemble: one run (a miss), one answer from the cache (a hit)
        assert _delta(before["digits_pipeline"], after["digits_pipeline"]) == {
            "success": 2,
            "queue": 2,
            "compute_input": 1,
            "compute_infer": 1,
            "compute_output": 1,
            "cache_hit": 1,
            "cache_miss": 1,
            "executions": 1,
            "inferences": 1,
        }
        # each step ran once: the hit ran none of them
        for step in PIPELINE[1:]:
            assert _delta(before[step], after[step])["executions"] == 1, step
        assert _delta(before["digits"], after["digits"])["cache_miss"] == 1

        # another image that preprocesses to the same pixels (1/255 * 16 rounds to 0): the
        # ensemble misses, its preprocessing runs, and the classifier step is a hit of its own
        close = image.copy()
        close[0, 0, 0] = 1
        before = after
        third = _read(client, close)
        after = {name: _counts(client, name) for name in PIPELINE}
        np.testing.assert_array_equal(first[0], third[0])
        assert _delta(before["digits_pipeline"], after["digits_pipeline"])["cache_miss"] == 1
        assert _delta(before["digits_preprocess"], after["digits_preprocess"])["executions"] == 1
        assert _delta(before["digits"], after["digits"]) == {
            "success": 1,
            "queue": 1,
            "cache_hit": 1,
        }
        assert _delta(before["digits_postprocess"], after["digits_postprocess"])["executions"] == 1
    finally:
        client.close()


def test_cache_counters_on_metrics_as_triton_reports_them(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        image = np.full((1, 8, 8), 7, np.uint8)
        _read(client, image)
        _read(client, image)
    finally:
        client.close()
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    cache_lines = [line for line in text.splitlines() if line.startswith("nv_cache_num_hits")]
    assert any('model="digits"' in line for line in cache_lines)
    assert not any('model="digits_pipeline"' in line for line in cache_lines)
    assert 'nv_inference_request_success{model="digits_pipeline"' in text


def test_a_model_called_by_a_model_answers_from_its_cache(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inputs = [
            httpclient.InferInput("MODEL", [1], "BYTES"),
            httpclient.InferInput("INPUT0", [16], "INT32"),
            httpclient.InferInput("INPUT1", [16], "INT32"),
        ]
        inputs[0].set_data_from_numpy(np.array([b"simple"], dtype=object))
        inputs[1].set_data_from_numpy(np.arange(16, dtype=np.int32))
        inputs[2].set_data_from_numpy(np.full(16, 3, dtype=np.int32))
        before = _counts(client, "simple")
        for _ in range(3):
            result = client.infer("bls_router", inputs)
            assert result.as_numpy("OUTPUT0").tolist() == list(range(3, 19))
        delta = _delta(before, _counts(client, "simple"))
        assert delta["executions"] == 1  # the business-logic call ran simple once
        assert delta["cache_miss"] == 1
        assert delta["cache_hit"] == 2
    finally:
        client.close()
