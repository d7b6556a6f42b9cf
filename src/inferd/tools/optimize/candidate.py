"""What every candidate builder returns, and how it says it cannot build one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from inferd.errors import CandidateSkipped

__all__ = ["ONNX_PLATFORM", "OPENVINO_PLATFORM", "Candidate", "CandidateSkipped"]

ONNX_PLATFORM = "onnxruntime_onnx"
OPENVINO_PLATFORM = "openvino"


@dataclass(frozen=True)
class Candidate:
    """One model file made from the baseline, ready to be evaluated, measured and served.

    ``name`` is unique within a run and safe as a folder name (``int8-static-entropy-pc``);
    ``kind`` is its family (``baseline``, ``graph``, ``transformer``, ``fp16``, ``bf16``,
    ``int8-dynamic``, ``int8-static``, ``int8-mixed``, ``prune-2of4``, ``prune-channels``,
    ``distilled``, ``openvino``, ``nncf-int8``). ``path`` is the model file the platform loads
    (``.onnx`` for ONNX Runtime, ``.xml`` with its ``.bin`` beside it for OpenVINO).
    ``parameters`` are the ``config.pbtxt`` parameters the served model needs to run as measured
    (for example an OpenVINO precision hint); ``recipe`` says how it was made (method,
    calibration, per-channel, excluded nodes...) as plain JSON values; ``notes`` are sentences
    the report shows (what was excluded and why, why a pattern saves no time on this CPU).
    """

    name: str
    kind: str
    path: Path
    platform: str = ONNX_PLATFORM
    parameters: Mapping[str, str] = field(default_factory=dict)
    recipe: Mapping[str, object] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    parent: str | None = None
