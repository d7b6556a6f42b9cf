"""Which candidates a run builds, in what order, from what.

Every step builds from the run's *source*: the baseline's own ONNX file, or for a PyTorch model
the ONNX export (the first step, which later steps then start from). A step that does not apply
to the model (transformer fusions on a CNN) says so by raising CandidateSkipped; the run goes on.
After the INT8 steps, an accuracy repair is planned when static INT8 missed the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.candidate import ONNX_PLATFORM, Candidate, CandidateSkipped
from inferd.tools.optimize.context import PlanContext
from inferd.tools.optimize.staging import TORCH_PLATFORM

if TYPE_CHECKING:
    import numpy as np

    from inferd.tools.optimize.data import Dataset
    from inferd.tools.optimize.decide import Goals, Outcome

__all__ = ["KINDS", "PlanContext", "Step", "plan_steps", "repair_steps"]

#: every kind of candidate ``--only`` can name, in the order they are built
KINDS = (
    "onnx-export",
    "torch-fp16",
    "torch-bf16",
    "graph",
    "transformer",
    "fp16",
    "bf16",
    "int8-dynamic",
    "int8-static",
    "int8-mixed",
    "openvino",
    "nncf-int8",
    "prune-2of4",
    "prune-channels",
)


Builder = Callable[[PlanContext, Path, Mapping[str, object]], Candidate]


@dataclass(frozen=True)
class Step:
    name: str
    kind: str
    build: Builder
    source: bool = False  # its candidate becomes the source of the steps after it
    options: Mapping[str, object] = field(default_factory=dict)


def baseline_source(context: PlanContext) -> Candidate | None:
    """The baseline as an ONNX candidate, when it is one."""
    if context.platform != ONNX_PLATFORM:
        return None
    filename = context.config.default_model_filename or "model.onnx"
    path = context.version_dir / filename
    if not path.is_file():
        raise InvalidArgumentError(f"{path} not found: the model's ONNX file")
    return Candidate(name="baseline", kind="baseline", path=path)


def _wanted(context: PlanContext, kind: str) -> bool:
    """Whether ``--only`` asks for ``kind`` (empty: every kind; ``none``: no kind)."""
    return not context.only or kind in context.only


def plan_steps(context: PlanContext) -> tuple[PlanContext, list[Step]]:
    """The context with its source set (for ONNX baselines), and the steps to run."""
    from inferd.tools.optimize import builders as b

    steps: list[Step] = []
    if context.platform == TORCH_PLATFORM:
        steps.append(Step("onnx-export", "onnx-export", b.export_onnx, source=True))
        for precision in ("fp16", "bf16"):
            name = f"torch-{precision}"
            steps.append(Step(name, name, b.torch_half, options={"precision": precision}))
    elif context.platform == ONNX_PLATFORM:
        from dataclasses import replace

        context = replace(context, source=baseline_source(context))
    else:
        raise InvalidArgumentError(
            f"inferd optimize works on ONNX and PyTorch (TorchScript) models; "
            f"'{context.spec.name}' is {context.platform or 'of an unknown platform'}"
        )
    steps += [
        Step("graph", "graph", b.graph_optimized),
        Step("transformer", "transformer", b.transformer_fused),
        Step("fp16", "fp16", b.fp16),
        Step("bf16", "bf16", b.bf16),
        Step("int8-dynamic", "int8-dynamic", b.int8_dynamic),
        Step("int8-dynamic-pc", "int8-dynamic", b.int8_dynamic, options={"per_channel": True}),
        Step("transformer-int8-dynamic", "int8-dynamic", b.transformer_int8_dynamic),
        Step("int8-static-minmax", "int8-static", b.int8_static, options={"method": "minmax"}),
        Step(
            "int8-static-minmax-pc",
            "int8-static",
            b.int8_static,
            options={"method": "minmax", "per_channel": True},
        ),
        Step(
            "int8-static-entropy-pc",
            "int8-static",
            b.int8_static,
            options={"method": "entropy", "per_channel": True},
        ),
        Step(
            "int8-static-percentile-pc",
            "int8-static",
            b.int8_static,
            options={"method": "percentile", "per_channel": True},
        ),
        Step("openvino", "openvino", b.openvino_ir),
        Step("nncf-int8", "nncf-int8", b.nncf_int8),
        Step("nncf-int8-bf16", "nncf-int8", b.nncf_int8_bf16),
        Step("prune-2of4", "prune-2of4", b.prune_2of4),
        Step("prune-channels", "prune-channels", b.prune_channels),
    ]
    chosen = [s for s in steps if _wanted(context, s.kind) or s.source]
    if context.device != "cpu":
        chosen = [_on_gpu(s, context.device) for s in chosen]
    return context, chosen


#: kinds whose runtime computes on the host only (OpenVINO's CPU plugin)
HOST_ONLY = frozenset({"bf16", "openvino", "nncf-int8"})


def _skipped(reason: str) -> Builder:
    def build(context: PlanContext, work: Path, options: Mapping[str, object]) -> Candidate:
        raise CandidateSkipped(reason)

    return build


def _on_gpu(step: Step, device: str) -> Step:
    """``step`` as it applies when candidates are measured on ``device`` (a GPU): host-only
    runtimes are skipped, and ONNX candidates too when ONNX Runtime cannot use CUDA."""
    from dataclasses import replace

    from inferd.tools.optimize.device import cuda_problem

    if step.kind in HOST_ONLY:
        reason = f"OpenVINO computes on the host, and this run measures on {device}"
        return replace(step, build=_skipped(reason))
    if step.kind.startswith("torch-"):
        return step
    problem = cuda_problem(ONNX_PLATFORM, int(device.partition(":")[2] or 0))
    if problem is not None:
        return replace(step, build=_skipped(f"ONNX candidates cannot run on {device}: {problem}"))
    return step


def _missed(
    kind: str,
    outcomes: Sequence[Outcome],
    candidates: Mapping[str, Candidate],
    metric: str,
    goals: Goals,
) -> list[Outcome] | None:
    """The measured candidates of ``kind`` when every one missed the budget (else None)."""
    baseline = outcomes[0]
    measured = [
        o for o in outcomes if o.kind == kind and o.quality is not None and o.name in candidates
    ]
    if not measured or baseline.quality is None:
        return None
    base = baseline.quality.value
    if any(goals.budget.passes(metric, base, o.quality.value) for o in measured if o.quality):
        return None
    return measured


def repair_steps(
    context: PlanContext,
    outcomes: Sequence[Outcome],
    candidates: Mapping[str, Candidate],
    eval_data: Dataset,
    reference: np.ndarray,
    output: str,
    metric: str,
    goals: Goals,
) -> list[Step]:
    """``int8-mixed`` steps: static INT8 with its most sensitive nodes in float when every static
    candidate missed the accuracy budget, and dynamic INT8 likewise when every dynamic one did.
    Both rank the nodes on the best static candidate's QDQ graph (dynamic quantization has no
    QDQ graph to compare, and the activations that spoil one spoil the other: both give a tensor
    one scale). None when a candidate of that kind already met the budget."""
    if not _wanted(context, "int8-mixed") or context.source is None or outcomes[0].quality is None:
        return []
    statics = _missed("int8-static", outcomes, candidates, metric, goals)
    if statics is None:
        # a static candidate met the budget, or none was built: nothing to rank the nodes on
        # unless one was built and qualified; then no dynamic repair is needed either
        return []
    from inferd.tools.optimize import builders as b

    best = max(statics, key=lambda o: o.quality.value if o.quality else float("-inf"))
    shared: dict[str, object] = {
        "from": best.name,
        "from_path": str(candidates[best.name].path),
        "recipe": dict(candidates[best.name].recipe),
        "eval": eval_data,
        "reference": reference,
        "output": output,
        "metric": metric,
        "budget": goals.budget,
        "baseline_value": outcomes[0].quality.value,
    }
    steps = [Step("int8-mixed", "int8-mixed", b.int8_mixed, options=shared)]
    dynamics = _missed("int8-dynamic", outcomes, candidates, metric, goals)
    if dynamics is not None:
        plain = [o for o in dynamics if o.name == "int8-dynamic"] or dynamics
        steps.append(
            Step(
                "int8-dynamic-mixed",
                "int8-mixed",
                b.int8_dynamic_mixed,
                options={**shared, "dynamic_from": plain[0].name},
            )
        )
    return steps
