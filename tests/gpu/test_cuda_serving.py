"""Models on a CUDA GPU (``pytest -m gpu``; skipped where torch sees no CUDA device).

A real server serves the TorchScript digits CNN on ``KIND_GPU`` and answers as the same model
run by torch on the host; a ``torch.export`` program runs on the GPU too; instances land on the
device Triton's rule gives; the GPU gauges read back from /metrics with Triton's labels; and an
ONNX Runtime without CUDA refuses ``KIND_GPU`` saying what to install.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.core.devices import visible_gpu_count
from inferd.testing import ServerProcess, running_server
from tests.gpu.common import TORCH_CNN, cnn_repo, gpu_gauges, read_metrics
from tests.helpers.models import ADD_SUB_CONFIG, write_add_sub

torch = pytest.importorskip("torch")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or visible_gpu_count() == 0,
        reason="needs a CUDA GPU (torch or NVML sees none)",
    ),
]

RNG = np.random.default_rng(7)
# cuDNN's convolutions may run in TF32 (torch's default): close to the host's FP32, not equal
CLOSE: dict[str, float] = {"rtol": 1e-2, "atol": 2e-3}


def _images(rows: int) -> np.ndarray:
    return RNG.uniform(0, 16, size=(rows, 1, 8, 8)).astype(np.float32)


def _reference(images: np.ndarray) -> np.ndarray:
    module = torch.jit.load(str(TORCH_CNN / "1" / "model.pt"), map_location="cpu").eval()
    with torch.inference_mode():
        return module(torch.from_numpy(images)).numpy()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("repo")
    cnn_repo(repo, "instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]", name="cnn_gpu")
    cnn_repo(repo, "", name="cnn_auto")  # no instance group: KIND_AUTO, the GPU here
    write_add_sub(
        repo, "simple_gpu", config=ADD_SUB_CONFIG + "instance_group [ { kind: KIND_GPU } ]"
    )
    with running_server([repo], ["--model-control-mode", "explicit"]) as proc:
        yield proc


def _infer(server: ServerProcess, model: str, images: np.ndarray) -> np.ndarray:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    image = grpcclient.InferInput("INPUT__0", list(images.shape), "FP32")
    image.set_data_from_numpy(images)
    result: np.ndarray = client.infer(model, [image]).as_numpy("OUTPUT__0")
    return result


def test_torchscript_on_the_gpu_answers_as_on_the_host(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.load_model("cnn_gpu")
    config = client.get_model_config("cnn_gpu", as_json=True)["config"]
    assert config["instance_group"][0]["kind"] == "KIND_GPU"
    assert config["instance_group"][0]["gpus"] == [0]
    for rows in (1, 7, 32):
        images = _images(rows)
        np.testing.assert_allclose(_infer(server, "cnn_gpu", images), _reference(images), **CLOSE)


def test_auto_puts_a_torch_model_on_the_gpu(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.load_model("cnn_auto")
    group = client.get_model_config("cnn_auto", as_json=True)["config"]["instance_group"][0]
    assert group["kind"] == "KIND_GPU"
    assert group["gpus"] == [str(i) for i in range(visible_gpu_count())] or group["gpus"] == list(
        range(visible_gpu_count())
    )
    images = _images(5)
    np.testing.assert_allclose(_infer(server, "cnn_auto", images), _reference(images), **CLOSE)


def test_gpu_gauges_read_back_with_triton_labels(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.load_model("cnn_gpu")
    _infer(server, "cnn_gpu", _images(32))
    text = read_metrics(server.metrics_url)
    total = gpu_gauges(text, "nv_gpu_memory_total_bytes")
    assert len(total) == visible_gpu_count()
    assert all(uuid.startswith("GPU-") for uuid in total)
    assert all(value > 0 for value in total.values())
    assert all(v > 0 for v in gpu_gauges(text, "nv_gpu_memory_used_bytes").values())
    utilization = gpu_gauges(text, "nv_gpu_utilization")
    assert set(utilization) == set(total)
    assert all(0.0 <= v <= 1.0 for v in utilization.values())
    assert set(gpu_gauges(text, "nv_gpu_power_usage")) == set(total)


def test_energy_counter_and_perf_collect_metrics(server: ServerProcess, tmp_path: Path) -> None:
    """``nv_energy_consumption`` grows while the GPU works, and ``inferd perf
    --collect-metrics`` reports each GPU's utilization, power and memory and the energy per
    inference, as perf_analyzer's columns."""
    import json
    import subprocess
    import sys

    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.load_model("cnn_gpu")
    before = gpu_gauges(read_metrics(server.metrics_url), "nv_energy_consumption")
    assert before
    assert all(v >= 0 for v in before.values())
    report = tmp_path / "perf.json"
    csv_file = tmp_path / "perf.csv"
    subprocess.run(
        [sys.executable, "-m", "inferd", "perf", "-m", "cnn_gpu", "-u", server.http_url,
         "-b", "8", "--concurrency-range", "4", "--measurement-interval", "1500",
         "--collect-metrics", "--metrics-url", server.metrics_url, "--metrics-interval", "200",
         "--json-output", str(report), "-f", str(csv_file), "--verbose-csv", "-q"],
        check=True,
        timeout=300,
    )  # fmt: skip
    after = gpu_gauges(read_metrics(server.metrics_url), "nv_energy_consumption")
    assert all(after[u] > before[u] for u in before)
    point = json.loads(report.read_text())["points"][0]
    metrics = point["server_metrics"]
    assert set(metrics["gpu_memory_total_bytes"]) == set(before)
    assert all(v > 0 for v in metrics["gpu_power_w"].values())
    assert all(v > 0 for v in metrics["gpu_memory_used_bytes"].values())
    assert point["cost"]["gpu_energy_j_per_1000"] > 0
    assert "Avg GPU Utilization" in csv_file.read_text().splitlines()[0]


def test_onnx_runtime_without_cuda_refuses_kind_gpu(server: ServerProcess) -> None:
    import onnxruntime as ort

    client = grpcclient.InferenceServerClient(server.grpc_url)
    if "CUDAExecutionProvider" in ort.get_available_providers():
        client.load_model("simple_gpu")
        a = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
        a.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        b = grpcclient.InferInput("INPUT1", [1, 16], "INT32")
        b.set_data_from_numpy(np.ones((1, 16), np.int32))
        out = client.infer("simple_gpu", [a, b]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, np.arange(1, 17, dtype=np.int32).reshape(1, 16))
        return
    with pytest.raises(InferenceServerException, match="install onnxruntime-gpu"):
        client.load_model("simple_gpu")


def _load_torch(model_dir: Path) -> Any:
    from inferd.backends.base import LoadContext
    from inferd.backends.registry import default_registry
    from inferd.backends.torch.backend import TorchBackend
    from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
    from inferd.repository.autocomplete import complete_config
    from inferd.repository.normalize import normalize_and_validate

    path = model_dir / "config.pbtxt"
    cfg = parse_pbtxt(path.read_text(), str(path))
    complete_config(
        cfg, model_dir, [1], default_registry(load_entry_points=False), auto_complete=True
    )
    normalize_and_validate(cfg, model_dir, gpu_count=visible_gpu_count())
    ctx = LoadContext(
        spec=spec_from_proto(cfg), version=1, model_dir=model_dir, version_dir=model_dir / "1"
    )
    return TorchBackend().load(ctx)


def _run(instance: Any, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from inferd.core.inference import InferRequest
    from inferd.errors import InferdError

    [result] = instance.execute([InferRequest(model_name=model, inputs=inputs)])
    assert not isinstance(result, InferdError), result
    outputs: dict[str, np.ndarray] = result
    return outputs


def test_instances_land_on_the_gpu_triton_names(tmp_path: Path) -> None:
    from inferd.core.model_spec import InstanceGroupSpec

    model = _load_torch(cnn_repo(tmp_path, "") / "cnn")
    last = visible_gpu_count() - 1
    group = InstanceGroupSpec(name="g", kind="KIND_GPU", count=2, gpus=(last,))
    images = _images(4)
    for index in range(2):
        instance = model.create_instance(group, index)
        assert instance.device == torch.device("cuda", last)
        out = _run(instance, "cnn", {"INPUT__0": images})["OUTPUT__0"]
        np.testing.assert_allclose(out, _reference(images), **CLOSE)
        instance.close()
    model.close()


def test_an_exported_program_runs_on_the_gpu(tmp_path: Path) -> None:
    from inferd.core.model_spec import InstanceGroupSpec

    class Affine(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2.0 + 1.0

    model_dir = tmp_path / "affine"
    (model_dir / "1").mkdir(parents=True)
    batch = torch.export.Dim("batch", max=64)
    program = torch.export.export(Affine(), (torch.ones(2, 3),), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(model_dir / "1" / "model.pt2"))
    (model_dir / "config.pbtxt").write_text('platform: "torch_export"\n')  # completed
    model = _load_torch(model_dir)
    instance = model.create_instance(InstanceGroupSpec(name="g", kind="KIND_GPU", count=1), 0)
    assert instance.device.type == "cuda"
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    [name] = _run(instance, "affine", {"x": x})
    np.testing.assert_allclose(_run(instance, "affine", {"x": x})[name], x * 2 + 1)
    instance.close()
    model.close()
