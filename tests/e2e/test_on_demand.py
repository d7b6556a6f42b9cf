"""On-demand loading within a memory budget: ``inferd serve --model-control-mode on-demand``
driven by tritonclient: reloads after eviction, one load for concurrent requests, a model too
big for the budget, a failed load failing only its own requests, eviction under load."""

from __future__ import annotations

import os
import queue
import re
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, running_server
from tests.e2e.conftest import raw_request
from tests.helpers.models import finish
from tests.helpers.monitoring_assets import exported_names, is_on_demand, used_names

pytestmark = pytest.mark.e2e

# a 48 MiB table of float32, read once for the three sessions of the model (two instances and a
# solo session): each model holds about that much, well above what the server holds beside it
ROWS = 768 * 1024
MODELS = {"m1": 1.0, "m2": 2.0, "m3": 3.0, "m4": 4.0}  # name -> the value its table holds
CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {{ name: "X" data_type: TYPE_FP32 dims: [ 1, 16 ] }},
  {{ name: "I" data_type: TYPE_INT64 dims: [ 1 ] }}
]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1, 16 ] }} ]
"""


ENSEMBLE = """
name: "ens"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "X" data_type: TYPE_FP32 dims: [ 1, 16 ] },
  { name: "I" data_type: TYPE_INT64 dims: [ 1 ] }
]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1, 16 ] } ]
ensemble_scheduling { step [ {
  model_name: "step1" model_version: -1
  input_map { key: "X" value: "X" } input_map { key: "I" value: "I" }
  output_map { key: "Y" value: "Y" }
} ] }
"""
WARMUP = """
model_warmup [ {
  name: "w" batch_size: 1
  inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 1, 16 ] input_data_file: "none.bin" } }
  inputs { key: "I" value: { data_type: TYPE_INT64 dims: [ 1 ] zero_data: true } }
} ]
"""


def table_model(value: float) -> bytes:
    """Y = X + table[I]: the table (ROWS x 16 float32) stays in memory, as a model's weights."""
    table = numpy_helper.from_array(np.full((ROWS, 16), value, np.float32), "table")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "I"], ["row"], axis=0),
            helper.make_node("Add", ["X", "row"], ["Y"]),
        ],
        "table",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", 1, 16]),
            helper.make_tensor_value_info("I", TensorProto.INT64, ["b", 1]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b", 1, 16])],
        initializer=[table],
    )
    return finish(graph)


def write(repo: Path, name: str, model: bytes) -> Path:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.onnx").write_bytes(model)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
    return repo / name


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("on_demand_repo")
    for name, value in MODELS.items():
        write(root, name, table_model(value))
    # too big: a sparse 1 TiB weights file beside a valid model (no disk space used)
    huge = write(root, "huge", table_model(9.0))
    with (huge / "1" / "weights.bin").open("wb") as f:
        f.truncate(1 << 40)
    # broken: its model file is not ONNX
    write(root, "broken", b"this is not an onnx model")
    # an ensemble of one step
    write(root, "step1", table_model(7.0))
    (root / "ens" / "1").mkdir(parents=True)
    (root / "ens" / "config.pbtxt").write_text(ENSEMBLE)
    # its warm-up runs inside the on-demand load: one whose data file is missing fails it
    warm = write(root, "warm_fail", table_model(5.0))
    with (warm / "config.pbtxt").open("a") as f:
        f.write(WARMUP)
    return root


def _metrics(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def _metric(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}{re.escape(labels)} (\S+)$"
    match = re.search(pattern, text, re.MULTILINE)
    assert match is not None, f"{name}{labels} not in the metrics"
    return float(match.group(1))


def _index(server: ServerProcess) -> dict[str, dict[str, Any]]:
    with httpclient.InferenceServerClient(server.http_url) as client:
        return {e["name"]: e for e in client.get_model_repository_index()}


def _inputs(module: Any, rows: int = 1) -> list[Any]:
    x = module.InferInput("X", [rows, 1, 16], "FP32")
    x.set_data_from_numpy(np.arange(rows * 16, dtype=np.float32).reshape(rows, 1, 16))
    i = module.InferInput("I", [rows, 1], "INT64")
    i.set_data_from_numpy(np.zeros((rows, 1), np.int64))
    return [x, i]


def _infer_http(server: ServerProcess, name: str) -> None:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120) as client:
        y = client.infer(name, _inputs(httpclient)).as_numpy("Y")
    expected = np.arange(16, dtype=np.float32).reshape(1, 1, 16) + MODELS.get(name, 7.0)
    np.testing.assert_array_equal(y, expected)


@pytest.fixture(scope="module")
def sizes(repo: Path) -> Iterator[dict[str, int]]:
    """Each model's measured size and the server's baseline, from a server with no eviction
    (a budget of all the machine's memory), so the budget below holds three of the four."""
    args = ["--model-control-mode", "on-demand", "--model-memory-budget", "100%"]
    with running_server([repo], args) as proc:
        for name in MODELS:
            _infer_http(proc, name)
        index = _index(proc)
        found = {name: int(index[name]["memory_bytes"]) for name in MODELS}
        found["baseline"] = int(_metric(_metrics(proc), "inferd_model_memory_baseline_bytes"))
        yield found


@pytest.fixture(scope="module")
def server(repo: Path, sizes: dict[str, int]) -> Iterator[ServerProcess]:
    models = sorted(sizes[n] for n in MODELS)
    # room for the two largest models and half the smallest, not for all four: some model is
    # always evicted even when this server measures its models (or its own baseline) smaller
    # than the server that sized them did, by up to one and a half models
    budget = sizes["baseline"] + models[-1] + models[-2] + models[0] // 2
    args = [
        "--model-control-mode",
        "on-demand",
        "--model-memory-budget",
        str(budget),
        "--model-min-residency-secs",
        "0",
        "--exit-on-error",
        "false",
    ]
    with running_server([repo], args) as proc:
        yield proc


def test_a_request_for_an_evicted_model_is_answered_after_its_reload(
    server: ServerProcess,
) -> None:
    for name in MODELS:
        _infer_http(server, name)
    index = _index(server)
    evicted = [n for n in MODELS if index[n].get("on_demand") == "available"]
    assert evicted, index
    entry = index[evicted[0]]
    # Triton's fields keep their meaning; inferd's say why and when
    assert entry["state"] == "UNAVAILABLE"
    assert "evicted at" in entry["reason"]
    assert "to make room for" in entry["reason"]
    assert entry["evicted_at"]
    assert int(entry["memory_bytes"]) > 0
    assert index["m4"]["on_demand"] == "resident"
    assert index["m4"]["state"] == "READY"
    before = _metrics(server)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:  # and over gRPC
        y = client.infer(evicted[0], _inputs(grpcclient)).as_numpy("Y")
    assert float(y[0, 0, 0]) == MODELS[evicted[0]]
    after = _metrics(server)
    reloads = 'inferd_model_loads_total{reason="after_eviction"}'
    assert _metric(after, reloads) == _metric(before, reloads) + 1
    assert _metric(after, "inferd_model_evictions_total") >= 2
    assert _metric(after, "inferd_model_memory_budget_bytes") > 0
    assert _metric(after, "inferd_model_resident_bytes", f'{{model="{evicted[0]}"}}') > 0
    assert _metric(after, "inferd_model_load_duration_seconds_count", '{runtime="onnxruntime"}')


def test_a_grpc_stream_request_loads_its_model(server: ServerProcess) -> None:
    index = _index(server)
    target = next(n for n in MODELS if index[n].get("on_demand") != "resident")
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put(error or result))
        try:
            client.async_stream_infer(target, _inputs(grpcclient))
            got = results.get(timeout=60)
        finally:
            client.stop_stream()
    assert not isinstance(got, InferenceServerException), got
    assert float(got.as_numpy("Y")[0, 0, 0]) == MODELS[target]


def test_concurrent_requests_during_a_load_share_one_load(server: ServerProcess) -> None:
    index = _index(server)
    target = next(n for n in MODELS if index[n].get("on_demand") != "resident")
    key = 'inferd_model_loads_total{reason="after_eviction"}'
    before = _metric(_metrics(server), key) + _metric(
        _metrics(server), 'inferd_model_loads_total{reason="first_request"}'
    )
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda _: _infer_http(server, target), range(16)))
    text = _metrics(server)
    after = _metric(text, key) + _metric(text, 'inferd_model_loads_total{reason="first_request"}')
    assert after == before + 1


def test_a_model_too_big_for_the_budget_is_refused_saying_so(server: ServerProcess) -> None:
    body = (
        b'{"inputs":[{"name":"X","shape":[1,1,16],"datatype":"FP32","data":['
        + b",".join([b"0"] * 16)
        + b']},{"name":"I","shape":[1,1],"datatype":"INT64","data":[0]}]}'
    )
    reply = raw_request(server.http_url, "POST", "/v2/models/huge/infer", body)
    assert reply.status == 503
    assert re.search(r"'huge' needs \d{13} bytes \(on disk\)", reply.error), reply.error
    assert "more than the memory budget" in reply.error
    assert _index(server)["huge"]["on_demand"] == "too_big"
    _infer_http(server, "m1")  # the others are served


def test_a_failed_load_fails_only_its_own_requests(server: ServerProcess) -> None:
    def broken(_: int) -> str:
        with (
            httpclient.InferenceServerClient(server.http_url, network_timeout=120) as client,
            pytest.raises(InferenceServerException) as caught,
        ):
            client.infer("broken", _inputs(httpclient))
        return str(caught.value)

    with ThreadPoolExecutor(8) as pool:
        failures = [pool.submit(broken, i) for i in range(4)]
        served = [pool.submit(_infer_http, server, name) for name in ("m2", "m3", "m4", "m1")]
        messages = [f.result() for f in failures]
        for f in served:
            f.result()
    assert all("broken" in m for m in messages), messages
    assert _index(server)["broken"]["state"] == "UNAVAILABLE"


def test_a_failed_load_answers_with_its_error_during_the_back_off(
    server: ServerProcess,
) -> None:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120) as client:
        for _ in range(2):  # the second comes within the back-off of the first's failure
            with pytest.raises(InferenceServerException) as caught:
                client.infer("broken", _inputs(httpclient))
    message = str(caught.value)
    assert "failed to load 'broken'" in message
    assert "tried again on a request after" in message
    assert "--model-load-retry-secs" in message


def test_the_warm_up_runs_inside_the_on_demand_load(server: ServerProcess) -> None:
    with (
        httpclient.InferenceServerClient(server.http_url) as client,
        pytest.raises(InferenceServerException, match="warmup 'w' cannot build its inputs"),
    ):
        client.infer("warm_fail", _inputs(httpclient))


def test_eviction_under_load_fails_no_request(server: ServerProcess) -> None:
    names = list(MODELS)
    evictions = _metric(_metrics(server), "inferd_model_evictions_total")

    def client(k: int) -> None:
        for j in range(12):
            _infer_http(server, names[(k + j) % len(names)])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(client, range(8)))  # raises on the first failed request
    assert _metric(_metrics(server), "inferd_model_evictions_total") > evictions


def test_the_server_exports_every_on_demand_metric_the_dashboard_and_rules_read(
    server: ServerProcess,
) -> None:
    _infer_http(server, "m1")  # a load at least: the latency histogram has a series
    wanted = {name for name in used_names() if is_on_demand(name)}
    assert {
        "inferd_model_loads_total",
        "inferd_model_evictions_total",
        "inferd_model_resident_bytes",
        "inferd_model_memory_budget_bytes",
        "inferd_model_load_duration_seconds_bucket",
    } <= wanted
    missing = wanted - exported_names(_metrics(server))
    assert not missing, f"read but not exported in on-demand mode: {sorted(missing)}"


def test_explicit_load_is_refused_in_on_demand_mode(server: ServerProcess) -> None:
    with (
        httpclient.InferenceServerClient(server.http_url) as client,
        pytest.raises(InferenceServerException, match="not allowed in on-demand mode"),
    ):
        client.load_model("m1")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model-memory-budget", "1GiB"], "only apply to --model-control-mode=on-demand"),
        (
            ["--model-control-mode", "on-demand", "--model-pin", "m1"],
            "--model-pin need --model-memory-budget",
        ),
        (
            ["--model-control-mode", "on-demand", "--model-memory-budget", "lots"],
            "--model-memory-budget 'lots' is not a size",
        ),
        (["--model-load-retry-secs", "5"], "--model-load-retry-secs only apply to"),
        (
            ["--model-control-mode", "on-demand", "--model-load-retry-secs", "-1"],
            "--model-load-retry-secs must be >= 0",
        ),
        (
            ["--model-control-mode", "on-demand", "--model-load-thread-count", "0"],
            "--model-load-thread-count must be >= 1",
        ),
        (
            ["--model-control-mode", "on-demand", "--model-eviction", "lru"],
            "--model-eviction need --model-memory-budget",
        ),
        (
            ["--model-control-mode", "on-demand", "--model-eviction", "mru"],
            "argument --model-eviction: invalid choice: 'mru'",
        ),
    ],
)
def test_flags_that_make_no_sense_are_refused(repo: Path, args: list[str], message: str) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", "serve", "--model-repository", str(repo), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
        check=False,
    )
    assert done.returncode != 0
    assert message in done.stderr


def test_the_cost_policy_keeps_a_busy_model_that_lru_would_evict(
    repo: Path, sizes: dict[str, int]
) -> None:
    """``--model-eviction cost``: m1, asked for often but least recently, outstays m2 (asked
    for once) when m3 needs room (least recently used would take m1)."""
    models = sorted(sizes[n] for n in MODELS)
    # room for m1 (the largest: it carries the runtime's libraries) and one other model
    budget = sizes["baseline"] + models[-1] + models[1] + models[0] // 2
    args = ["--model-control-mode", "on-demand", "--model-memory-budget", str(budget)]
    args += ["--model-min-residency-secs", "0", "--model-eviction", "cost"]
    with running_server([repo], args) as proc:
        for _ in range(20):
            _infer_http(proc, "m1")
        for name in ("m2", "m3", "m4"):
            _infer_http(proc, name)
        index = _index(proc)
        log = proc.log()
    # (m1 may leave after that: a load after an unload can measure more than its estimate, and
    # the loader then makes room for what it measured)
    assert index["m2"]["on_demand"] == "available", index
    assert "(least worth keeping, idle)" in index["m2"]["reason"]
    evicted = re.findall(r"model '(m\d)' evicted at \S+ to make room for '(m\d)'", log)
    assert evicted[0] == ("m2", "m3"), evicted  # the first choice: m2, not the busy m1


@pytest.fixture(scope="module")
def pinned(repo: Path, sizes: dict[str, int]) -> Iterator[ServerProcess]:
    """m1 pinned (loaded first, it also carries the runtime's libraries), and room for two
    more models."""
    ordered = sorted(sizes[n] for n in MODELS)
    budget = sizes["baseline"] + ordered[-1] + 2 * ordered[1] + ordered[1] // 2
    args = ["--model-control-mode", "on-demand", "--model-memory-budget", str(budget)]
    args += ["--model-pin", "m1", "--model-min-residency-secs", "0"]
    with running_server([repo], args) as proc:
        yield proc


def test_a_pinned_model_loads_at_start_and_is_never_evicted(pinned: ServerProcess) -> None:
    index = _index(pinned)
    assert index["m1"]["on_demand"] == "resident"
    assert index["m1"]["pinned"] == "true"
    for name in ("m2", "m3", "m4", "m2", "m3", "m4"):
        _infer_http(pinned, name)
    index = _index(pinned)
    assert index["m1"]["state"] == "READY"
    assert _metric(_metrics(pinned), "inferd_model_evictions_total") >= 1
    assert _metric(_metrics(pinned), 'inferd_model_loads_total{reason="startup"}') == 1


def test_an_ensembles_step_models_leave_with_it(pinned: ServerProcess) -> None:
    _infer_http(pinned, "ens")
    index = _index(pinned)
    assert index["step1"]["state"] == "READY"
    # the other models take the room back: ens, the least recently used, leaves once the
    # policy weighs it lowest (which load that is depends on the sizes the server measured)
    for _ in range(3):
        for name in ("m2", "m3", "m4"):
            _infer_http(pinned, name)
        index = _index(pinned)
        if index["ens"]["on_demand"] == "available":
            break
    assert index["ens"]["on_demand"] == "available"
    assert index["step1"]["state"] == "UNAVAILABLE"
    assert "a step of ensemble 'ens'" in index["step1"]["reason"]
    _infer_http(pinned, "ens")  # and both come back


def test_a_budget_caps_the_malloc_arenas_at_one_per_core(server: ServerProcess) -> None:
    """With a budget, the server caps glibc's malloc arenas (MALLOC_ARENA_MAX unset here), so
    memory unloads free is not held apart in many per-thread arenas; the log says so."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        pytest.skip("the operator's MALLOC_ARENA_MAX is left as it is")
    assert re.search(r"malloc arenas capped at \d+ \(one per core\)", server.log())


def test_a_budget_makes_onnx_runtime_arenas_give_memory_back(server: ServerProcess) -> None:
    """Under a budget, an ONNX Runtime model's arena shrinks back after each run (its config
    says nothing), so a model keeps no batch's activations beyond its measured size. The load
    logs its session layout before the model answers."""
    _infer_http(server, "m1")
    layout = r"model 'm1' version 1: onnxruntime .*, arena shrinks after each run \(cpu:0\)"
    assert re.search(layout, server.log())
