"""Dynamic batching, statistics and metrics, seen from outside through tritonclient."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import ADD_SUB_CONFIG, add_sub_model, spin_model

pytestmark = pytest.mark.e2e

BATCHED = ADD_SUB_CONFIG + "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
BOUNDED = """
name: "bounded"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("batching")
    (repo / "batched" / "1").mkdir(parents=True)
    (repo / "batched" / "config.pbtxt").write_text(BATCHED.replace("{name}", "batched"))
    (repo / "batched" / "1" / "model.onnx").write_bytes(add_sub_model(0))
    # max_batch_size 8 so the dynamic batcher (and its queue policy) applies
    bounded = (
        BOUNDED.replace("max_batch_size: 0", "max_batch_size: 8")
        + "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n"
        + "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )
    (repo / "bounded" / "1").mkdir(parents=True)
    (repo / "bounded" / "config.pbtxt").write_text(bounded)
    (repo / "bounded" / "1" / "model.onnx").write_bytes(spin_model(batched=True))
    with running_server([repo]) as proc:
        yield proc


def _add_sub_inputs(value: int) -> list[grpcclient.InferInput]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        inp = grpcclient.InferInput(name, [1, 16], "INT32")
        inp.set_data_from_numpy(np.full((1, 16), value, np.int32))
        inputs.append(inp)
    return inputs


def test_concurrent_requests_are_batched_and_counted(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)

    def one(value: int) -> int:
        result = client.infer("batched", _add_sub_inputs(value))
        return int(result.as_numpy("OUTPUT0")[0, 0])

    with ThreadPoolExecutor(16) as pool:
        sums = list(pool.map(one, range(64)))
    assert sums == [2 * v for v in range(64)]

    http = httpclient.InferenceServerClient(server.http_url)
    stats = http.get_inference_statistics("batched")
    http.close()
    entry = stats["model_stats"][0]
    assert entry["version"] == "1"
    assert entry["inference_count"] == 64
    assert entry["inference_stats"]["success"]["count"] == 64
    assert entry["inference_stats"]["queue"]["count"] == 64
    assert entry["execution_count"] < 64  # some requests shared an execution
    sizes = [b["batch_size"] for b in entry["batch_stats"]]
    assert max(sizes) > 1
    assert sum(b["batch_size"] * b["compute_infer"]["count"] for b in entry["batch_stats"]) == 64

    grpc_stats = client.get_inference_statistics("batched", as_json=True)
    assert grpc_stats["model_stats"][0]["inference_count"] == "64"  # int64 as JSON string


def _metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} {labels} not found")


def test_full_queue_is_refused_and_counted_by_reason(server: ServerProcess) -> None:
    def one(value: int) -> str:
        client = httpclient.InferenceServerClient(server.http_url)  # one per thread
        inp = httpclient.InferInput("IN", [1, 1], "INT32")
        inp.set_data_from_numpy(np.array([[value]], np.int32))
        try:
            client.infer("bounded", [inp])
        except InferenceServerException as exc:
            return f"{exc.status()} {exc.message()}"
        finally:
            client.close()
        return "ok"

    # each request spins ~20 units; one runs, one waits, the rest find the queue full
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(one, [20] * 8))
    refused = [o for o in outcomes if o != "ok"]
    assert "ok" in outcomes
    assert refused
    assert all(o.startswith("503") and "Exceeds maximum queue size" in o for o in refused)

    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    assert _metric(
        text, "inferd_rejected_requests_total", model="bounded", reason="queue_full"
    ) == len(refused)
    assert _metric(text, "nv_inference_request_failure", model="bounded", reason="REJECTED") == len(
        refused
    )
    assert _metric(text, "nv_inference_request_success", model="bounded") == outcomes.count("ok")
    assert "# TYPE nv_inference_request_success counter" in text
    assert _metric(text, "nv_inference_count", model="batched") == 64
    assert _metric(text, "inferd_batch_size_count", model="batched") < 64
    assert 0.0 <= _metric(text, "nv_cpu_utilization") <= 1.0
    # the server process's own cost, as Prometheus' process collector reports it
    assert _metric(text, "process_cpu_seconds_total") > 0
    assert _metric(text, "process_resident_memory_bytes") > 10 * 2**20
