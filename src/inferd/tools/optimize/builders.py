"""The plan's steps, each a call into the module that builds that kind of candidate.

Every builder takes the run's context, a folder of its own to write into, and the step's
options, and returns a :class:`Candidate` (or raises CandidateSkipped with the reason). The
float model the quantizers start from is pre-processed once per source and kept in the
context's cache, so every INT8 candidate (and the repair) is made from the same graph, with the
same node names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from inferd.tools.optimize.candidate import Candidate, CandidateSkipped
from inferd.tools.optimize.context import PlanContext
from inferd.tools.optimize.metrics import Budget, agreement_figures, task_figures

__all__ = [
    "bf16",
    "export_onnx",
    "fp16",
    "graph_optimized",
    "int8_dynamic",
    "int8_dynamic_mixed",
    "int8_mixed",
    "int8_static",
    "nncf_int8",
    "nncf_int8_bf16",
    "openvino_ir",
    "prune_2of4",
    "prune_channels",
    "torch_half",
    "transformer_fused",
    "transformer_int8_dynamic",
]

Options = Mapping[str, object]
SAMPLE_ROWS = 8


def _sample(context: PlanContext) -> dict[str, np.ndarray[Any, Any]]:
    return {k: np.asarray(v) for k, v in context.calibration.head(SAMPLE_ROWS).inputs.items()}


def _source_path(context: PlanContext) -> Path:
    return context.source_model().path


def _prepared(context: PlanContext, source: Path) -> Any:
    """The source pre-processed for the quantizers, once per source file."""
    from inferd.tools.optimize.quant_prepare import prepare_model

    key = ("prepared", str(source))
    if key not in context.cache:
        folder = Path(context.work_root) / f"prepared-{len(context.cache)}"
        folder.mkdir(parents=True, exist_ok=True)
        context.cache[key] = prepare_model(source, folder)
    return context.cache[key]


def export_onnx(context: PlanContext, work: Path, options: Options) -> Candidate:
    from inferd.tools.optimize.export import build_onnx_baseline

    model = context.version_dir / (context.config.default_model_filename or "model.pt")
    return build_onnx_baseline(
        model,
        work,
        sample=_sample(context),
        output_names=[t.name for t in context.spec.outputs],
    )


def graph_optimized(context: PlanContext, work: Path, options: Options) -> Candidate:
    from inferd.tools.optimize.graph import build_ort_optimized

    return build_ort_optimized(
        _source_path(context), work, sample=_sample(context), level=str(options.get("level", "all"))
    )


def transformer_fused(context: PlanContext, work: Path, options: Options) -> Candidate:
    from inferd.tools.optimize.graph import build_transformer_fused

    candidate = build_transformer_fused(_source_path(context), work, sample=_sample(context))
    context.cache[("transformer", "path")] = candidate.path
    return candidate


def fp16(context: PlanContext, work: Path, options: Options) -> Candidate:
    if context.device.startswith("cuda"):
        from inferd.tools.optimize.cuda_fp16 import build_fp16_cuda

        gpu = int(context.device.partition(":")[2] or 0)
        return build_fp16_cuda(_source_path(context), work, sample=_sample(context), gpu=gpu)
    from inferd.tools.optimize.precision import build_fp16

    return build_fp16(_source_path(context), work, sample=_sample(context))


def torch_half(context: PlanContext, work: Path, options: Options) -> Candidate:
    """The TorchScript model in FP16 or BF16, cast at the boundary, on the run's device."""
    from inferd.tools.optimize.torch_precision import build_torch_half

    model = context.version_dir / (context.config.default_model_filename or "model.pt")
    if not model.exists() and (context.version_dir / "model.pt2").exists():
        model = context.version_dir / "model.pt2"
    return build_torch_half(
        model,
        work,
        precision=str(options.get("precision", "bf16")),
        sample=_sample(context),
        output_types=[t.datatype.name for t in context.spec.outputs],
        device=context.device,
    )


def bf16(context: PlanContext, work: Path, options: Options) -> Candidate:
    from inferd.tools.optimize.precision import build_bf16

    return build_bf16(_source_path(context), work, sample=_sample(context))


def int8_dynamic(context: PlanContext, work: Path, options: Options) -> Candidate:
    from inferd.tools.optimize.quantize import quantize_dynamic_int8

    prepared = _prepared(context, _source_path(context))
    return quantize_dynamic_int8(prepared, work, per_channel=bool(options.get("per_channel")))


def transformer_int8_dynamic(context: PlanContext, work: Path, options: Options) -> Candidate:
    """Dynamic INT8 over the transformer-fused graph (its fused attention quantizes as one)."""
    from inferd.tools.optimize.quantize import quantize_dynamic_int8

    fused = context.cache.get(("transformer", "path"))
    if fused is None:
        raise CandidateSkipped("there is no transformer-fused graph to quantize")
    prepared = _prepared(context, Path(str(fused)))
    return quantize_dynamic_int8(prepared, work, name="transformer-int8-dynamic")


def _static_settings(options: Options) -> Any:
    from inferd.tools.optimize.quantize import StaticSettings

    return StaticSettings(
        method=str(options.get("method", "minmax")),
        per_channel=bool(options.get("per_channel", False)),
    )


def int8_static(context: PlanContext, work: Path, options: Options) -> Candidate:
    from inferd.tools.optimize.quantize import quantize_static_int8

    prepared = _prepared(context, _source_path(context))
    return quantize_static_int8(prepared, context.calibration, work, _static_settings(options))


class _EvalJudge:
    """The repair's judge: the candidate file run by ONNX Runtime over the eval rows, scored
    like every candidate (task metric with labels, else agreement with the baseline)."""

    def __init__(self, options: Options) -> None:
        self._data = options["eval"]
        self._reference = np.asarray(options["reference"])
        self._output = str(options["output"])
        self._metric = str(options["metric"])
        self._baseline = float(options["baseline_value"])  # type: ignore[arg-type]
        budget = options["budget"]
        assert isinstance(budget, Budget)
        self._budget = budget

    def quality(self, path: Path) -> float:
        from inferd.tools.optimize.verify import onnx_session, run_onnx

        session = onnx_session(path, threads=0)
        parts = [
            run_onnx(session, batch, [self._output])[self._output]
            for batch in self._data.batches(64)  # type: ignore[attr-defined]
        ]
        outputs = np.concatenate(parts, axis=0)
        labels = self._data.labels  # type: ignore[attr-defined]
        figures = agreement_figures(outputs, self._reference)
        if labels is not None:
            figures.update(task_figures(outputs, labels))
        return figures[self._metric]

    def budget_ok(self, value: float) -> bool:
        return self._budget.passes(self._metric, self._baseline, value)


def _ranking(context: PlanContext, work: Path, options: Options) -> list[Any]:
    """The quantized nodes of the best static candidate, worst first (computed once a run)."""
    from inferd.tools.optimize.sensitivity import node_sensitivity

    key = ("sensitivity", str(options["from_path"]))
    if key not in context.cache:
        prepared = _prepared(context, _source_path(context))
        quantized = Path(str(options["from_path"]))
        context.cache[key] = node_sensitivity(
            prepared.path, quantized, context.calibration, work / "sensitivity"
        )
    ranking = context.cache[key]
    assert isinstance(ranking, list)
    return ranking


def _with_ranking(candidate: Candidate, ranking: list[Any], parent: str) -> Candidate:
    sensitivity = [{"node": s.node, "op_type": s.op_type, "score": s.score} for s in ranking[:50]]
    return Candidate(
        name=candidate.name,
        kind=candidate.kind,
        path=candidate.path,
        platform=candidate.platform,
        parameters=candidate.parameters,
        recipe={**candidate.recipe, "sensitivity": sensitivity},
        notes=candidate.notes,
        parent=parent,
    )


def int8_mixed(context: PlanContext, work: Path, options: Options) -> Candidate:
    """Static INT8 with the most sensitive nodes kept in float until the budget holds."""
    from inferd.tools.optimize.repair import repair_static

    prepared = _prepared(context, _source_path(context))
    recipe = options.get("recipe")
    recipe = recipe if isinstance(recipe, dict) else {}
    settings = _static_settings(
        {"method": recipe.get("calibration", "minmax"), "per_channel": recipe.get("per_channel")}
    )
    ranking = _ranking(context, work, options)
    candidate = repair_static(
        prepared, context.calibration, work, settings, ranking, _EvalJudge(options)
    )
    return _with_ranking(candidate, ranking, str(options.get("from")))


def int8_dynamic_mixed(context: PlanContext, work: Path, options: Options) -> Candidate:
    """Dynamic INT8 with the nodes the static ranking finds most sensitive kept in float."""
    from inferd.tools.optimize.quantize import quantize_dynamic_int8
    from inferd.tools.optimize.repair import repair_exclusions

    prepared = _prepared(context, _source_path(context))
    ranking = _ranking(context, work, options)

    def build(excluded: Any, try_name: str) -> Candidate:
        return quantize_dynamic_int8(
            prepared, work, per_channel=True, nodes_to_exclude=list(excluded), name=try_name
        )

    candidate = repair_exclusions(ranking, _EvalJudge(options), build, work, "int8-dynamic-mixed")
    return _with_ranking(candidate, ranking, str(options.get("dynamic_from")))


def openvino_ir(context: PlanContext, work: Path, options: Options) -> Candidate:
    from inferd.tools.optimize.openvino import build_openvino

    return build_openvino(_source_path(context), work, sample=_sample(context))


def nncf_int8(context: PlanContext, work: Path, options: Options) -> Candidate:
    from inferd.tools.optimize.openvino import build_nncf_int8

    candidate = build_nncf_int8(
        _source_path(context), work, sample=_sample(context), calibration=context.calibration
    )
    context.cache[("nncf", "candidate")] = candidate
    return candidate


def nncf_int8_bf16(context: PlanContext, work: Path, options: Options) -> Candidate:
    """The NNCF INT8 model with its float layers in bfloat16 (CPUs with AVX-512 BF16 or AMX)."""
    from inferd.tools.optimize.precision import bf16_variant

    built = context.cache.get(("nncf", "candidate"))
    if not isinstance(built, Candidate):
        raise CandidateSkipped("there is no NNCF INT8 model to run in bfloat16")
    return bf16_variant(built, _source_path(context), sample=_sample(context))


def prune_2of4(context: PlanContext, work: Path, options: Options) -> Candidate:
    from inferd.tools.optimize.prune import prune_2of4 as build

    return build(_source_path(context), work, context.train, output=context.output)


def prune_channels(context: PlanContext, work: Path, options: Options) -> Candidate:
    from inferd.tools.optimize.prune import prune_channels as build

    ratio = float(options.get("ratio", 0.25))  # type: ignore[arg-type]
    return build(
        _source_path(context),
        work,
        ratio,
        context.train,
        sample=context.calibration.head(64),
        output=context.output,
    )
