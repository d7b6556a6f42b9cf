"""Process lifecycle: graceful shutdown with requests in flight, and poll mode picking up models."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from inferd.testing import running_server
from tests.helpers.models import write_add_sub

pytestmark = pytest.mark.e2e

SLOW_SIZE = 1024
SLOW_STEPS = 40  # 1024x1024 MatMuls per request: a few hundred ms on one CPU core
SLOW_CONFIG = """
name: "slow"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1, 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1, 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


def slow_model() -> bytes:
    """Y = sum(X * I @ I @ ... @ I) = X * 1024, through SLOW_STEPS dense 1024x1024 MatMuls.

    The chain starts from the input, so ONNX Runtime cannot fold it away at load time.
    """
    eye = numpy_helper.from_array(np.eye(SLOW_SIZE, dtype=np.float32), "W")
    consts = [
        helper.make_tensor("shape3", TensorProto.INT64, [3], [1, 1, 1]),
        helper.make_tensor("shape2", TensorProto.INT64, [2], [1, 1]),
        helper.make_tensor("axes", TensorProto.INT64, [2], [1, 2]),
    ]
    nodes = [
        helper.make_node("Reshape", ["X", "shape3"], ["x3"]),
        helper.make_node("Mul", ["x3", "W"], ["m0"]),
    ]
    for step in range(SLOW_STEPS):
        nodes.append(helper.make_node("MatMul", [f"m{step}", "W"], [f"m{step + 1}"]))
    nodes += [
        helper.make_node("ReduceSum", [f"m{SLOW_STEPS}", "axes"], ["total"], keepdims=0),
        helper.make_node("Reshape", ["total", "shape2"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 1])],
        initializer=[eye, *consts],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture(scope="module")
def slow_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slow") / "models"
    (root / "slow" / "1").mkdir(parents=True)
    (root / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    (root / "slow" / "1" / "model.onnx").write_bytes(slow_model())
    return root


def _slow_infer(url: str, value: float) -> float:
    with httpclient.InferenceServerClient(url, network_timeout=120) as client:
        x = httpclient.InferInput("X", [1, 1], "FP32")
        x.set_data_from_numpy(np.array([[value]], dtype=np.float32))
        return float(client.infer("slow", [x]).as_numpy("Y")[0, 0])


def _ready_status(url: str) -> int | None:
    """HTTP status of /v2/health/ready, or None once the server no longer answers."""
    try:
        with httpclient.InferenceServerClient(url, connection_timeout=5) as client:
            return 200 if client.is_server_ready() else 400
    except Exception:
        return None


def test_sigterm_finishes_in_flight_requests(slow_repo: Path) -> None:
    grace_s = 60
    with running_server([slow_repo], ["--exit-timeout-secs", str(grace_s)]) as server:
        url = server.http_url
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures: list[Future[float]] = [
                pool.submit(_slow_infer, url, float(i + 1)) for i in range(4)
            ]
            # The model runs one request at a time; once the first reply is back the other
            # three have been sent and are queued or running inside the server.
            first = next(as_completed(futures, timeout=120))
            assert first.result() > 0
            started = time.monotonic()
            server.process.send_signal(signal.SIGTERM)

            # No event tells us the signal was handled: poll readiness, which turns off as the
            # first stage of shutdown, with a bound (the requests take seconds to finish).
            deadline = time.monotonic() + 30
            while _ready_status(url) == 200:
                assert time.monotonic() < deadline, "server still ready after SIGTERM"
                time.sleep(0.05)
            # new work is refused (503) or finds the door closed
            outcome = _late_request(url)
            assert outcome == "connection refused" or (
                outcome.startswith("503 ") and "shutting down" in outcome
            ), outcome

            results = sorted(f.result(timeout=grace_s) for f in futures)
        assert results == [1024.0, 2048.0, 3072.0, 4096.0]
        code = server.process.wait(timeout=grace_s)
        assert code == 0, server.log()
        assert time.monotonic() - started < grace_s
        assert "shutting down" in server.log()


def _late_request(url: str) -> str:
    try:
        _slow_infer(url, 100.0)
    except InferenceServerException as exc:
        return f"{exc.status()} {exc.message()}"
    except OSError:
        return "connection refused"
    return "served"


def test_poll_mode_picks_up_a_new_model(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    write_add_sub(repo, "first")
    staging = tmp_path / "staging"
    args = ["--model-control-mode", "poll", "--repository-poll-secs", "1"]
    with running_server([repo], args) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            assert [e["name"] for e in client.get_model_repository_index()] == ["first"]
            assert not client.is_model_ready("second")
            # build the model aside and move it in with one rename, so a scan never sees half
            write_add_sub(staging, "second")
            os.rename(staging / "second", repo / "second")

            # The server announces nothing when a scan finds a model: poll the index, bounded
            # well above the 1 s scan period.
            deadline = time.monotonic() + 30
            while not client.is_model_ready("second"):
                assert time.monotonic() < deadline, client.get_model_repository_index()
                time.sleep(0.2)
            states = {e["name"]: e.get("state") for e in client.get_model_repository_index()}
            assert states == {"first": "READY", "second": "READY"}

            shutil.rmtree(repo / "second")
            deadline = time.monotonic() + 30
            while client.is_model_ready("second"):
                assert time.monotonic() < deadline, client.get_model_repository_index()
                time.sleep(0.2)
            assert client.is_model_ready("first")
            with pytest.raises(InferenceServerException, match="explicit model load"):
                client.load_model("second")
        finally:
            client.close()


def test_sigint_stops_an_idle_server(slow_repo: Path) -> None:
    with running_server([slow_repo]) as server:
        server.process.send_signal(signal.SIGINT)
        try:
            assert server.process.wait(timeout=30) == 0
        except subprocess.TimeoutExpired:
            pytest.fail(f"SIGINT did not stop the server:\n{server.log()}")
