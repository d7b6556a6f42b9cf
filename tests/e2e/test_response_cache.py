"""The response cache seen from outside: ``inferd serve --cache-config`` driven by tritonclient.

Repeated requests are answered from the cache (statistics and metrics say so, the model does not
run again), a changed input misses while another output selection or class_count of the same
inputs hits (the entry holds every raw output), a model without the cache never
hits, a reload starts from an empty cache, and bad configurations are refused loudly.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import ADD_SUB_CONFIG, write_add_sub

pytestmark = pytest.mark.e2e

CACHED = ADD_SUB_CONFIG + "response_cache { enable: true }\n"
DECOUPLED = CACHED + "model_transaction_policy { decoupled: true }\n"
SEQUENCE = CACHED + "sequence_batching { }\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cache_repo")
    write_add_sub(root, "cached", config=CACHED)
    write_add_sub(root, "plain")
    write_add_sub(root, "cached_decoupled", config=DECOUPLED)
    write_add_sub(root, "cached_sequence", config=SEQUENCE)
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    args = [
        "--cache-config",
        "local,size=1048576",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "cached",
        "--load-model",
        "plain",
    ]
    with running_server([repo], args) as proc:
        yield proc


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


def _data(seed: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    a = rng.integers(-1000, 1000, size=(1, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(1, 16), dtype=np.int32)
    return a, b


def _http_infer(
    client: httpclient.InferenceServerClient,
    model: str,
    a: np.ndarray[Any, Any],
    b: np.ndarray[Any, Any],
    outputs: list[httpclient.InferRequestedOutput] | None = None,
) -> httpclient.InferResult:
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=True)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    return client.infer(model, inputs, outputs=outputs)


def _grpc_infer(
    client: grpcclient.InferenceServerClient,
    model: str,
    a: np.ndarray[Any, Any],
    b: np.ndarray[Any, Any],
) -> grpcclient.InferResult:
    inputs = [
        grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return client.infer(model, inputs)


def _stats(client: httpclient.InferenceServerClient, model: str) -> dict[str, Any]:
    entry: dict[str, Any] = client.get_inference_statistics(model)["model_stats"][0]
    return entry


def _counts(entry: dict[str, Any]) -> dict[str, int]:
    phases = entry["inference_stats"]
    out = {phase: int(phases[phase]["count"]) for phase in phases}
    out["executions"] = int(entry["execution_count"])
    out["inferences"] = int(entry["inference_count"])
    return out


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def test_a_repeated_http_request_is_answered_from_the_cache(
    http: httpclient.InferenceServerClient,
) -> None:
    a, b = _data(1)
    before = _counts(_stats(http, "cached"))
    first = _http_infer(http, "cached", a, b)
    second = _http_infer(http, "cached", a, b)
    third = _http_infer(http, "cached", a, b)
    for result in (first, second, third):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    after = _counts(_stats(http, "cached"))
    # one miss ran the model; two hits did not: Triton's counting
    assert _delta(before, after) == {
        "success": 3,
        "queue": 3,
        "compute_input": 1,
        "compute_infer": 1,
        "compute_output": 1,
        "cache_hit": 2,
        "cache_miss": 1,
        "executions": 1,
        "inferences": 1,
    }
    entry = _stats(http, "cached")["inference_stats"]
    assert int(entry["cache_hit"]["ns"]) > 0
    assert int(entry["cache_miss"]["ns"]) > 0


def test_a_repeated_grpc_request_hits_and_grpc_statistics_show_it(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    a, b = _data(2)
    stats = grpc.get_inference_statistics("cached", as_json=True)["model_stats"][0]
    hits_before = int(stats["inference_stats"].get("cache_hit", {}).get("count", 0))
    for _ in range(3):
        result = _grpc_infer(grpc, "cached", a, b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    stats = grpc.get_inference_statistics("cached", as_json=True)["model_stats"][0]
    assert int(stats["inference_stats"]["cache_hit"]["count"]) == hits_before + 2


def test_http_and_grpc_share_the_entry_of_an_identical_request(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    a, b = _data(3)
    _http_infer(http, "cached", a, b)
    before = _counts(_stats(http, "cached"))
    result = _grpc_infer(grpc, "cached", a, b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert _delta(before, _counts(_stats(http, "cached")))["cache_hit"] == 1


def test_a_changed_input_misses(http: httpclient.InferenceServerClient) -> None:
    a, b = _data(4)
    _http_infer(http, "cached", a, b)
    changed = a.copy()
    changed[0, 7] += 1
    before = _counts(_stats(http, "cached"))
    result = _http_infer(http, "cached", changed, b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), changed + b)
    delta = _delta(before, _counts(_stats(http, "cached")))
    assert delta.get("cache_hit", 0) == 0
    assert delta["cache_miss"] == 1
    assert delta["executions"] == 1


def test_every_output_selection_and_class_count_is_answered_from_one_entry(
    http: httpclient.InferenceServerClient,
) -> None:
    """The key is the inputs, not the outputs asked for: the entry holds every raw output, so a
    miss that asked for OUTPUT0 alone answers a later request for OUTPUT1 and classes."""
    a, b = _data(5)
    before = _counts(_stats(http, "cached"))
    only_sum = _http_infer(http, "cached", a, b, [httpclient.InferRequestedOutput("OUTPUT0")])
    everything = _http_infer(http, "cached", a, b)
    top2 = _http_infer(
        http, "cached", a, b, [httpclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    )
    difference = _http_infer(http, "cached", a, b, [httpclient.InferRequestedOutput("OUTPUT1")])
    assert only_sum.as_numpy("OUTPUT1") is None
    np.testing.assert_array_equal(everything.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(everything.as_numpy("OUTPUT1"), a - b)
    np.testing.assert_array_equal(difference.as_numpy("OUTPUT1"), a - b)
    assert difference.as_numpy("OUTPUT0") is None
    labels = top2.as_numpy("OUTPUT0")
    assert labels is not None
    assert labels.shape == (1, 2)
    best = int(np.argmax((a + b)[0]))
    assert labels[0, 0].decode().split(":")[1] == str(best)
    delta = _delta(before, _counts(_stats(http, "cached")))
    assert delta["cache_miss"] == 1
    assert delta["cache_hit"] == 3
    assert delta["executions"] == 1


def test_a_model_without_the_cache_never_hits(http: httpclient.InferenceServerClient) -> None:
    a, b = _data(6)
    before = _counts(_stats(http, "plain"))
    for _ in range(3):
        _http_infer(http, "plain", a, b)
    delta = _delta(before, _counts(_stats(http, "plain")))
    assert delta["executions"] == 3
    assert "cache_hit" not in delta
    assert "cache_miss" not in delta


def _metrics(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def _sample(text: str, name: str, model: str) -> float | None:
    found = re.search(rf'^{name}{{model="{model}",version="1"}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else None


def test_metrics_count_hits_and_misses_for_cached_models_only(
    server: ServerProcess, http: httpclient.InferenceServerClient
) -> None:
    a, b = _data(7)
    for _ in range(2):
        _http_infer(http, "cached", a, b)
        _http_infer(http, "plain", a, b)
    text = _metrics(server)
    stats = _stats(http, "cached")["inference_stats"]
    assert _sample(text, "nv_cache_num_hits_per_model", "cached") == stats["cache_hit"]["count"]
    assert _sample(text, "nv_cache_num_misses_per_model", "cached") == stats["cache_miss"]["count"]
    hit_us = _sample(text, "nv_cache_hit_duration_per_model", "cached")
    assert hit_us is not None
    assert hit_us == pytest.approx(stats["cache_hit"]["ns"] / 1000)
    assert _sample(text, "nv_cache_miss_duration_per_model", "cached") is not None
    assert _sample(text, "nv_cache_num_hits_per_model", "plain") is None
    # cached requests are successes, not inferences
    success = _sample(text, "nv_inference_request_success", "cached")
    inferences = _sample(text, "nv_inference_count", "cached")
    assert success is not None
    assert inferences is not None
    assert success - inferences == stats["cache_hit"]["count"]


def test_a_reloaded_model_starts_from_an_empty_cache(
    http: httpclient.InferenceServerClient,
) -> None:
    a, b = _data(8)
    _http_infer(http, "cached", a, b)
    _http_infer(http, "cached", a, b)
    http.load_model("cached")  # a reload: the new load may answer differently
    before = _counts(_stats(http, "cached"))
    _http_infer(http, "cached", a, b)
    delta = _delta(before, _counts(_stats(http, "cached")))
    assert delta["cache_miss"] == 1
    assert "cache_hit" not in delta


@pytest.mark.parametrize(
    ("model", "message"),
    [("cached_decoupled", "decoupled"), ("cached_sequence", "sequence batcher")],
)
def test_sequence_and_decoupled_models_with_the_cache_are_refused(
    http: httpclient.InferenceServerClient, model: str, message: str
) -> None:
    with pytest.raises(InferenceServerException, match=message):
        http.load_model(model)
    assert http.is_server_live()


def test_a_server_without_a_cache_serves_such_a_model_uncached_and_says_so(repo: Path) -> None:
    """As Triton does: the model loads and every request runs it; the log names the flag."""
    with running_server([repo], ["--model-control-mode", "explicit"]) as proc:
        client = httpclient.InferenceServerClient(proc.http_url)
        try:
            client.load_model("cached")
            assert client.is_model_ready("cached")
            a, b = _data(7)
            for _ in range(2):
                _http_infer(client, "cached", a, b)
            counts = _counts(_stats(client, "cached"))
            assert counts["executions"] == 2  # the repeat ran the model: nothing is cached
            assert counts.get("cache_hit", 0) == 0
            assert "enables response_cache but the server has no cache" in proc.log()
            assert "--cache-config local,size=" in proc.log()
        finally:
            client.close()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("redis,host=localhost", "unknown cache 'redis'"),
        ("local,bytes=10", "no setting 'bytes'"),
        ("local,size=lots", "positive number of bytes"),
        ("size=10", "needs a cache name"),
    ],
)
def test_a_bad_cache_config_is_refused_at_start(repo: Path, value: str, message: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "inferd.cli.main",
            "serve",
            "--model-repository",
            str(repo),
            "--cache-config",
            value,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert message in done.stderr
