"""Shared pieces of the GPU tests: the committed TorchScript CNN copied with an instance group of
the test's choosing, and a /metrics reader."""

from __future__ import annotations

import re
import shutil
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TORCH_CNN = ROOT / "examples" / "models-torch" / "digits_cnn_torch"


def cnn_repo(repo: Path, instance_group: str, name: str = "cnn") -> Path:
    """``digits_cnn_torch`` as ``name`` under ``repo`` with ``instance_group`` appended."""
    target = repo / name
    shutil.copytree(TORCH_CNN, target)
    config = target / "config.pbtxt"
    text = config.read_text().replace('name: "digits_cnn_torch"', f'name: "{name}"')
    config.write_text(text + "\n" + instance_group + "\n")
    return repo


def read_metrics(metrics_url: str) -> str:
    with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=30) as reply:
        assert reply.status == 200
        return str(reply.read().decode())


def gpu_gauges(text: str, name: str) -> dict[str, float]:
    """``name{gpu_uuid="..."} value`` lines in the shape perf_analyzer's regex reads (one label,
    a plain decimal value: a value in exponent form does not match)."""
    found = re.findall(rf'^{name}\{{gpu_uuid="([^"]+)"\}} (\d+\.?\d*)$', text, re.M)
    return {uuid: float(value) for uuid, value in found}
