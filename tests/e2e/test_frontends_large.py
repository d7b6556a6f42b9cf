"""``inferd serve --frontends 2`` with tensors far larger than a ring slot: their bytes travel
through the channel's arenas (or, while an arena is full, in pieces), and every answer is the
request's tensor back, unchanged, over HTTP and gRPC, many at once."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto

from inferd.testing import ServerProcess, running_server
from tests.helpers.models import identity_model, write_model

pytestmark = pytest.mark.e2e

CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
# 1 MiB, and 3 MiB: eight of those at once are more than an arena holds (16 MiB)
SIZES = (1 << 18, 3 << 18)


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("frontends-large")
    write_model(repo, "echo", identity_model([("X", "Y", TensorProto.FLOAT)], [None]), CONFIG)
    with running_server([repo], ["--frontends", "2"]) as proc:
        yield proc


def _tensor(seed: int, size: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(size).astype(np.float32)


def _http_echo(server: ServerProcess, seed: int, size: int) -> bool:
    data = _tensor(seed, size)
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    try:
        tensor = httpclient.InferInput("X", [size], "FP32")
        tensor.set_data_from_numpy(data, binary_data=True)
        out = [httpclient.InferRequestedOutput("Y", binary_data=True)]
        result = client.infer("echo", [tensor], outputs=out).as_numpy("Y")
    finally:
        client.close()
    return bool(np.array_equal(result, data))


def _grpc_echo(server: ServerProcess, seed: int, size: int) -> bool:
    data = _tensor(seed, size)
    options = [("grpc.max_receive_message_length", 64 << 20)]
    client = grpcclient.InferenceServerClient(server.grpc_url, channel_args=options)
    try:
        tensor = grpcclient.InferInput("X", [size], "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer("echo", [tensor], client_timeout=120).as_numpy("Y")
    finally:
        client.close()
    return bool(np.array_equal(result, data))


@pytest.mark.parametrize("size", SIZES)
def test_one_large_tensor_each_way(multi: ServerProcess, size: int) -> None:
    assert _http_echo(multi, 1, size)
    assert _grpc_echo(multi, 2, size)


def test_many_large_tensors_at_once_over_both_protocols(multi: ServerProcess) -> None:
    jobs = [(protocol, seed, SIZES[seed % 2]) for seed in range(16) for protocol in ("h", "g")]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(
            pool.map(
                lambda job: (_http_echo if job[0] == "h" else _grpc_echo)(multi, job[1], job[2]),
                jobs,
            )
        )
    assert results == [True] * len(jobs)
