"""FP16/BF16 TorchScript candidates cast at the boundary: weights in the new type, the served
inputs and outputs in the configuration's, argument names kept so the pytorch backend binds the
inputs as before; BF16 built and checked on the host, FP16 left to a GPU; and the candidate
served by a real ``inferd serve`` answering through tritonclient as the file does under torch."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from inferd.codecs.model_config import parse_pbtxt  # noqa: E402
from inferd.tools.optimize.candidate import CandidateSkipped  # noqa: E402
from inferd.tools.optimize.staging import TORCH_PLATFORM, stage  # noqa: E402
from inferd.tools.optimize.torch_precision import build_torch_half  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CNN = ROOT / "examples" / "models-torch" / "digits_cnn_torch"


def _images(rows: int, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 16, size=(rows, 1, 8, 8)).astype(np.float32)


def _load(path: Path) -> Any:
    return torch.jit.load(str(path), map_location="cpu").eval()


def test_bf16_keeps_the_served_types_and_agrees_with_fp32(tmp_path: Path) -> None:
    images = _images(8)
    candidate = build_torch_half(
        CNN / "1" / "model.pt",
        tmp_path,
        precision="bf16",
        sample={"INPUT__0": images},
        output_types=["FP32"],
    )
    assert (candidate.name, candidate.kind, candidate.platform) == (
        "torch-bf16",
        "torch-bf16",
        TORCH_PLATFORM,
    )
    module = _load(candidate.path)
    weights = {p.dtype for p in module.parameters()}
    assert weights == {torch.bfloat16}
    with torch.inference_mode():
        got = module(torch.from_numpy(images))
        want = _load(CNN / "1" / "model.pt")(torch.from_numpy(images))
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=0.05)
    assert not np.array_equal(got.numpy(), want.numpy())  # computed in bfloat16, not FP32
    recipe = candidate.recipe
    assert recipe["dtype"] == "bfloat16"
    assert recipe["device"] == "cpu"
    timing = recipe["device_ms"]
    assert isinstance(timing, dict)
    assert timing["clock"] == "the wall clock"
    assert timing["rows"] == 8
    assert timing["fp32"] > 0
    assert timing["bf16"] > 0
    assert "served inputs and outputs unchanged" in candidate.notes[0]


def test_fp16_is_left_to_a_gpu(tmp_path: Path) -> None:
    with pytest.raises(CandidateSkipped, match=r"torch-fp16 is a GPU candidate"):
        build_torch_half(
            CNN / "1" / "model.pt",
            tmp_path,
            precision="fp16",
            sample={"INPUT__0": _images(2)},
            output_types=["FP32"],
        )


class _Named(torch.nn.Module):
    """forward(features, ids, scale=None) -> (float scores, the integer ids plus one)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(
        self, features: torch.Tensor, ids: torch.Tensor, scale: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.linear(features)
        if scale is not None:
            scores = scores * scale
        return scores, ids + 1


def test_argument_names_and_integer_tensors_pass_through(tmp_path: Path) -> None:
    source = tmp_path / "named.pt"
    torch.jit.script(_Named().eval()).save(str(source))
    features = np.random.default_rng(5).normal(size=(6, 4)).astype(np.float32)
    ids = np.arange(6, dtype=np.int64)
    candidate = build_torch_half(
        source,
        tmp_path,
        precision="bf16",
        sample={"features": features, "ids": ids},
        output_types=["FP32", "INT64"],
    )
    module = _load(candidate.path)
    names = [a.name for a in module.forward.schema.arguments[1:]]
    assert names == ["features", "ids", "scale"]
    with torch.inference_mode():
        scores, back = module(torch.from_numpy(features), torch.from_numpy(ids))
        scaled, _ = module(torch.from_numpy(features), torch.from_numpy(ids), torch.tensor(2.0))
    assert (scores.dtype, back.dtype) == (torch.float32, torch.int64)
    np.testing.assert_array_equal(back.numpy(), ids + 1)
    np.testing.assert_allclose(scaled.numpy(), 2 * scores.numpy(), rtol=2e-2, atol=2e-2)


class _Counted(torch.nn.Module):
    def forward(self, x: torch.Tensor, times: int) -> torch.Tensor:
        return x * times


def test_a_non_tensor_argument_is_refused_by_name(tmp_path: Path) -> None:
    source = tmp_path / "counted.pt"
    torch.jit.script(_Counted()).save(str(source))
    with pytest.raises(CandidateSkipped, match=r"forward\(\) takes 'times' as IntType"):
        build_torch_half(
            source,
            tmp_path,
            precision="bf16",
            sample={"x": np.ones((2, 2), np.float32)},
            output_types=["FP32"],
        )


def test_outputs_of_several_float_types_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CandidateSkipped, match=r"several float types"):
        build_torch_half(
            CNN / "1" / "model.pt",
            tmp_path,
            precision="bf16",
            sample={"INPUT__0": _images(2)},
            output_types=["FP32", "FP16"],
        )


def test_a_torch_export_program_is_skipped_saying_so(tmp_path: Path) -> None:
    program = tmp_path / "model.pt2"
    program.write_bytes(b"")
    with pytest.raises(CandidateSkipped, match=r"torch.export programs \(model.pt2\)"):
        build_torch_half(program, tmp_path, precision="bf16", sample={}, output_types=["FP32"])


@pytest.mark.e2e
def test_the_staged_candidate_serves_as_its_file_answers(tmp_path: Path) -> None:
    httpclient = pytest.importorskip("tritonclient.http")
    from inferd.testing import running_server

    images = _images(16, seed=11)
    candidate = build_torch_half(
        CNN / "1" / "model.pt",
        tmp_path / "build",
        precision="bf16",
        sample={"INPUT__0": images[:8]},
        output_types=["FP32"],
    )
    config = parse_pbtxt((CNN / "config.pbtxt").read_text(), "config.pbtxt")
    repo = tmp_path / "repo"
    model_dir = stage(candidate, config, repo, "cnn_bf16", baseline_dir=CNN)
    staged = parse_pbtxt((model_dir / "config.pbtxt").read_text(), "config.pbtxt")
    assert (staged.platform, staged.backend, staged.name) == (TORCH_PLATFORM, "", "cnn_bf16")
    assert (model_dir / "1" / "model.pt").is_file()
    assert (model_dir / "labels.txt").is_file()
    with torch.inference_mode():
        want = _load(candidate.path)(torch.from_numpy(images)).numpy()
    with running_server([repo]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        request = httpclient.InferInput("INPUT__0", list(images.shape), "FP32")
        request.set_data_from_numpy(images)
        result = client.infer("cnn_bf16", [request])
        got = result.as_numpy("OUTPUT__0")
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    shutil.rmtree(repo)
