"""What every step of an optimisation run builds from: the model, its data and the run's source."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.codecs.model_config import ModelConfig
from inferd.core.model_spec import ModelSpec
from inferd.tools.optimize.candidate import Candidate, CandidateSkipped

if TYPE_CHECKING:
    from inferd.tools.optimize.data import Dataset

__all__ = ["PlanContext"]


@dataclass(frozen=True)
class PlanContext:
    spec: ModelSpec
    config: ModelConfig
    model_dir: Path
    version_dir: Path
    platform: str
    calibration: Dataset
    train: Dataset | None
    work_root: Path
    output: str | None = None  # the output compared (fine-tuning targets it)
    only: tuple[str, ...] = ()
    source: Candidate | None = None
    device: str = "cpu"  # where candidates are measured: cpu or cuda:N
    # built once, read by several steps (the graph pre-processed for quantization...)
    cache: dict[tuple[str, str], object] = field(default_factory=dict)

    def source_model(self) -> Candidate:
        if self.source is None:
            raise CandidateSkipped("no ONNX model to start from (the export step failed)")
        return self.source
