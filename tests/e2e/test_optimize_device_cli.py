"""``inferd optimize --device`` end to end on the TorchScript digits CNN whose configuration asks
for ``KIND_GPU``: on a machine where torch sees no CUDA device, ``auto`` (and ``cuda``) are
refused in one line with exit status 2 and nothing written, while ``--device cpu`` serves the
baseline and the BF16 candidate on the host and says so in the report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CNN = ROOT / "examples" / "models-torch" / "digits_cnn_torch"
FAST = ["--measurement-interval", "150", "--max-trials", "3", "--batch-sizes", "1,8"]
NO_CUDA = pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks a machine where torch sees no CUDA device"
)


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferd.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("device")
    repo = root / "repo"
    shutil.copytree(CNN, repo / "digits_cnn_torch")
    config = repo / "digits_cnn_torch" / "config.pbtxt"
    config.write_text(config.read_text() + "\ninstance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]\n")
    data = root / "data"
    made = subprocess.run(
        [sys.executable, "-m", "inferd.examples.optimize_data", "digits_cnn_torch", str(data)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return repo, data / "calibration.npz", data / "eval.npz"


def _optimize(setup: tuple[Path, Path, Path], results: Path, *extra: str) -> Any:
    repo, calibration, evaluation = setup
    return _run(
        "optimize", "digits_cnn_torch", "--model-repository", repo,
        "--calibration", calibration, "--eval", evaluation, "--results", results,
        "--only", "torch-bf16", "--dry-run", *FAST, *extra,
    )  # fmt: skip


@NO_CUDA
@pytest.mark.parametrize("device", ["auto", "cuda", "cuda:1"])
def test_a_gpu_torch_cannot_use_is_refused_in_one_line(
    setup: tuple[Path, Path, Path], tmp_path: Path, device: str
) -> None:
    done = _optimize(setup, tmp_path / "results", "--device", device)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    name = "cuda:1" if device == "cuda:1" else "cuda:0"
    assert lines[0].startswith(
        f"inferd optimize: error: cannot measure 'digits_cnn_torch' on {name}"
    )
    assert "sees no CUDA device" in lines[0]
    assert "use --device cpu to measure on the host" in lines[0]
    assert not (tmp_path / "results" / "report.json").exists()


def test_a_bad_device_is_a_usage_error(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    done = _optimize(setup, tmp_path / "results", "--device", "gpu0")
    assert done.returncode == 2
    assert "--device 'gpu0': give cpu, cuda, cuda:N or auto" in done.stderr


def test_device_cpu_measures_the_kind_gpu_model_on_the_host(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    repo = setup[0]
    before = (repo / "digits_cnn_torch" / "config.pbtxt").read_text()
    done = _optimize(setup, tmp_path / "results", "--device", "cpu")
    assert done.returncode in (0, 3), done.stderr
    assert "candidates measured on cpu" in done.stdout
    report = json.loads((tmp_path / "results" / "report.json").read_text())
    assert (report["device"], report["device_reason"]) == ("cpu", "asked for with --device")
    outcomes = {c["name"]: c for c in report["candidates"]}
    assert set(outcomes) == {"baseline", "onnx-export", "torch-bf16"}
    bf16 = outcomes["torch-bf16"]
    assert bf16["skipped"] is None, bf16["skipped"]
    assert bf16["quality"]["value"] >= outcomes["baseline"]["quality"]["value"] - 0.01
    assert bf16["recipe"]["device"] == "cpu"
    assert [p["batch_size"] for p in bf16["speed"]] == [1, 8]
    # the baseline was served from a copy with its instances on the host; the repository is
    # left as it was
    moved = tmp_path / "results" / "baseline-repository" / "digits_cnn_torch" / "config.pbtxt"
    assert "KIND_CPU" in moved.read_text()
    staged = tmp_path / "results" / "repository" / "torch-bf16" / "config.pbtxt"
    assert "KIND_CPU" in staged.read_text()
    assert "KIND_GPU" not in staged.read_text()
    assert (repo / "digits_cnn_torch" / "config.pbtxt").read_text() == before
