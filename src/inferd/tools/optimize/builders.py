"""The plan's steps, each a call into the module that builds that kind of candidate.

Every builder takes the run's context, a folder of its own to write into, and the step's
options, and returns a :class:`Candidate` (or raises CandidateSkipped with the reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from inferd.tools.optimize.candidate import Candidate, CandidateSkipped
from inferd.tools.optimize.plan import PlanContext

__all__ = [
    "bf16",
    "export_onnx",
    "fp16",
    "graph_optimized",
    "int8_dynamic",
    "int8_mixed",
    "int8_static",
    "nncf_int8",
    "openvino_ir",
    "prune_2of4",
    "prune_channels",
    "transformer_fused",
    "transformer_int8_dynamic",
]

Options = Mapping[str, object]


def _pending(kind: str) -> Candidate:
    raise CandidateSkipped(f"{kind} candidates are not built by this version")


def export_onnx(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("onnx-export")


def graph_optimized(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("graph")


def transformer_fused(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("transformer")


def fp16(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("fp16")


def bf16(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("bf16")


def int8_dynamic(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("int8-dynamic")


def transformer_int8_dynamic(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("int8-dynamic")


def int8_static(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("int8-static")


def int8_mixed(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("int8-mixed")


def openvino_ir(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("openvino")


def nncf_int8(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("nncf-int8")


def prune_2of4(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("prune-2of4")


def prune_channels(context: PlanContext, work: Path, options: Options) -> Candidate:
    return _pending("prune-channels")
