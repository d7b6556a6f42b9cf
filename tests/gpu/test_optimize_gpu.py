"""``inferd optimize`` on a CUDA GPU (``pytest -m gpu``; skipped where torch sees no CUDA
device): the TorchScript digits CNN on ``KIND_GPU`` gets FP16 and BF16 candidates built, checked
and served on the GPU (``--device auto`` follows the configuration), each timed on the device
with CUDA events; an ONNX model's FP16 candidate is checked and served with ONNX Runtime's CUDA
provider when ``onnxruntime-gpu`` is installed."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from inferd.core.devices import visible_gpu_count
from tests.gpu.common import TORCH_CNN, cnn_repo

torch = pytest.importorskip("torch")

from inferd.cli.perf_inprocess import running_engine  # noqa: E402
from inferd.tools.optimize.run import OptimizeOptions, OptimizeResult, optimize  # noqa: E402
from inferd.tools.optimize.speed import SpeedSettings  # noqa: E402
from inferd.tools.optimize.torch_precision import build_torch_half  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or visible_gpu_count() == 0,
        reason="needs a CUDA GPU (torch or NVML sees none)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
ONNX_CNN = ROOT / "examples" / "models" / "digits_cnn"
FAST = SpeedSettings(batch_sizes=(1, 8), measurement_interval_ms=200, max_trials=3)


def _data(folder: Path, rows: int = 64) -> tuple[Path, Path]:
    """Unlabelled images in 0..16: the candidates are judged by cosine to the baseline."""
    images = np.random.default_rng(17).uniform(0, 16, size=(rows, 1, 8, 8)).astype(np.float32)
    calibration, evaluation = folder / "calibration.npz", folder / "eval.npz"
    np.savez(calibration, INPUT__0=images[: rows // 2])
    np.savez(evaluation, INPUT__0=images[rows // 2 :])
    return calibration, evaluation


async def _optimize(repo: Path, model: str, tmp: Path, only: tuple[str, ...]) -> OptimizeResult:
    calibration, evaluation = _data(tmp)
    options = OptimizeOptions(
        model=model,
        repository=repo,
        calibration=calibration,
        eval_data=evaluation,
        results=tmp / "results",
        speed=FAST,
        only=only,
        write=False,
        device="auto",
    )
    return await optimize(options, running_engine)


async def test_torch_fp16_and_bf16_are_built_and_measured_on_the_gpu(tmp_path: Path) -> None:
    repo = cnn_repo(tmp_path / "repo", "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]")
    result = await _optimize(repo, "cnn", tmp_path, ("torch-fp16", "torch-bf16"))
    assert (result.device, result.device_reason) == (
        "cuda:0",
        "the model's instance group asks for KIND_GPU",
    )
    outcomes = {o.name: o for o in result.outcomes}
    for name in ("torch-fp16", "torch-bf16"):
        outcome = outcomes[name]
        assert outcome.skipped is None, outcome.skipped
        assert outcome.quality is not None
        assert outcome.quality.figures["cosine"] >= 0.99
        assert [p.batch_size for p in outcome.speed] == [1, 8]
        assert all(p.throughput > 0 for p in outcome.speed)
        recipe = result.candidates[name].recipe
        assert recipe["device"] == "cuda:0"
        timing = recipe["device_ms"]
        assert isinstance(timing, dict)
        assert timing["clock"] == "CUDA events"
    staged = (tmp_path / "results" / "repository" / "torch-fp16" / "config.pbtxt").read_text()
    assert "KIND_GPU" in staged
    assert "pytorch_libtorch" in staged


def test_the_fp16_wrapper_runs_on_the_gpu_with_fp32_in_and_out(tmp_path: Path) -> None:
    images = np.random.default_rng(3).uniform(0, 16, size=(8, 1, 8, 8)).astype(np.float32)
    candidate = build_torch_half(
        TORCH_CNN / "1" / "model.pt",
        tmp_path,
        precision="fp16",
        sample={"INPUT__0": images},
        output_types=["FP32"],
        device="cuda:0",
    )
    module = torch.jit.load(str(candidate.path), map_location="cuda:0").eval()
    assert {p.dtype for p in module.parameters()} == {torch.float16}
    reference = torch.jit.load(str(TORCH_CNN / "1" / "model.pt"), map_location="cpu").eval()
    with torch.inference_mode():
        got = module(torch.from_numpy(images).to("cuda:0"))
        want = reference(torch.from_numpy(images)).numpy()
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.cpu().numpy(), want, atol=2e-2)


async def test_onnx_fp16_is_measured_with_the_cuda_provider(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("this ONNX Runtime has no CUDA execution provider (onnxruntime-gpu)")
    repo = tmp_path / "repo"
    shutil.copytree(ONNX_CNN, repo / "digits_cnn")
    config = repo / "digits_cnn" / "config.pbtxt"
    config.write_text(config.read_text() + "\ninstance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]\n")
    result = await _optimize(repo, "digits_cnn", tmp_path, ("fp16",))
    assert result.device == "cuda:0"
    fp16 = next(o for o in result.outcomes if o.name == "fp16")
    assert fp16.skipped is None, fp16.skipped
    assert fp16.quality is not None
    assert fp16.quality.figures["cosine"] >= 0.99
    assert result.candidates["fp16"].recipe["execution_provider"] == "CUDAExecutionProvider"
