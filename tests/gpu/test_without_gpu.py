"""A machine without a GPU: ``KIND_GPU`` is refused by a real server with a message that says
why, the model's other instance kinds serve, and /metrics has no GPU gauges (and no error)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest

from inferd.core.devices import visible_gpu_count
from inferd.testing import ServerProcess, running_server
from tests.gpu.common import cnn_repo, read_metrics

grpcclient = pytest.importorskip("tritonclient.grpc")
pytest.importorskip("torch")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.skipif(
    visible_gpu_count() > 0, reason="checks a machine without a visible GPU"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("repo")
    cnn_repo(repo, "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]", name="cnn_gpu")
    cnn_repo(repo, "instance_group [ { kind: KIND_CPU } ]", name="cnn_cpu")
    with running_server([repo], ["--model-control-mode", "explicit"]) as proc:
        yield proc


def test_kind_gpu_is_refused_with_a_clear_message(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("cnn_gpu")
    message = str(refused.value)
    assert "instance group 'cnn_gpu' requests KIND_GPU but no GPU is available" in message
    assert "use KIND_CPU on this machine" in message
    assert not client.is_model_ready("cnn_gpu")


def test_the_host_serves_and_metrics_have_no_gpu_gauges(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.load_model("cnn_cpu")
    image = grpcclient.InferInput("INPUT__0", [2, 1, 8, 8], "FP32")
    image.set_data_from_numpy(np.full((2, 1, 8, 8), 8.0, np.float32))
    probabilities = client.infer("cnn_cpu", [image]).as_numpy("OUTPUT__0")
    assert probabilities.shape == (2, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    text = read_metrics(server.metrics_url)
    assert "nv_cpu_utilization" in text
    assert "nv_gpu_" not in text
    # memory sizes print as plain decimals, as Triton prints them (no exponent form)
    assert re.search(r"^nv_cpu_memory_total_bytes \d+$", text, re.M), text
