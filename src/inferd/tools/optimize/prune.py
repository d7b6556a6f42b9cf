"""Pruning candidates: 2:4 structured sparsity, and channel pruning that shrinks the compute.

- :func:`prune_2of4`: in every group of 4 consecutive weights along the reduction (input)
  dimension of each MatMul / Gemm / Conv weight, the 2 smallest in magnitude become zero
  (``torch.ao.pruning``'s ``WeightNormSparsifier`` with 1x4 blocks and 2 zeros per block picks
  them). The graph is kept as it is; only weights change. A CPU runtime stores and multiplies the
  zeros like any other value, so this saves no time or memory here (the notes say so); the
  pattern pays on GPUs with sparse tensor cores.
- :func:`prune_channels`: removes a ``ratio`` of the channels (output features) of every Linear
  and Conv layer but those that give the model's outputs, with Torch-Pruning's dependency graph
  so that coupled layers shrink together, and exports the smaller network back to ONNX with the
  same input and output names and dynamic dims. The ONNX graph is turned into a torch module by
  :mod:`inferd.tools.optimize.torch_graph` (MLPs and CNNs; other graphs are skipped with the
  operators named).

Both are followed by a short fine-tuning pass (:mod:`inferd.tools.optimize.finetune`) when
training rows are given, with the loss before and after in the candidate's recipe.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.errors import InvalidArgumentError, UnavailableError, UnsupportedError
from inferd.tools.optimize.candidate import Candidate, CandidateSkipped
from inferd.tools.optimize.sparsity import (
    CPU_SPARSITY_NOTE,
    WeightLayout,
    is_2of4,
    sparse_weights,
    tune_masked,
    two_of_four_masks,
)

if TYPE_CHECKING:
    import onnx
    import torch

    from inferd.tools.optimize.finetune import FineTuning, TrainingRows
    from inferd.tools.optimize.torch_graph import GraphModule

__all__ = [
    "CPU_SPARSITY_NOTE",
    "WeightLayout",
    "is_2of4",
    "prune_2of4",
    "prune_channels",
    "sparse_weights",
    "two_of_four_masks",
]

_ROWS_FOR_CHECKS = 16


def _need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        hints = {
            "torch": "PyTorch's CPU build (pip install torch --index-url "
            "https://download.pytorch.org/whl/cpu)",
            "torch_pruning": "pip install 'inferd[prune]'",
        }
        how = "; ".join(hints.get(m, "pip install 'inferd[optimize]'") for m in missing)
        raise UnavailableError(f"pruning needs {', '.join(missing)}: {how}")


# ---------------------------------------------------------------------------------------------
# 2:4 sparsity


def prune_2of4(
    model_path: Path,
    work: Path,
    train: TrainingRows | None = None,
    *,
    output: str | None = None,
    tuning: FineTuning | None = None,
) -> Candidate:
    """The 2:4 candidate of the ONNX model at ``model_path``, written as ``work/model.onnx``."""
    _need("torch", "onnx")
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(model_path))
    layouts, skipped = sparse_weights(model)
    if not layouts:
        raise CandidateSkipped(
            "no MatMul, Gemm or Conv weight has a reduction dimension that is a multiple of 4"
        )
    inits = {i.name: i for i in model.graph.initializer}
    weights = {w.initializer: numpy_helper.to_array(inits[w.initializer]) for w in layouts}
    masks_rows = two_of_four_masks([w.rows(weights[w.initializer]) for w in layouts])
    masks = {
        w.initializer: w.unrows(m, weights[w.initializer].shape)
        for w, m in zip(layouts, masks_rows, strict=True)
    }
    notes = [CPU_SPARSITY_NOTE]
    recipe: dict[str, object] = {
        "method": "2:4 structured sparsity: the 2 smallest of every 4 consecutive weights "
        "along the input dimension set to zero",
        "library": "torch.ao.pruning.WeightNormSparsifier (1x4 blocks, 2 zeros per block)",
        "tensors": len(layouts),
        "skipped": skipped,
    }
    tuned = None
    if train is not None:
        try:
            tuned = tune_masked(model, masks, train, output, tuning)
        except UnsupportedError as exc:
            notes.append(f"not fine-tuned: {exc.message}")
    if tuned is None:
        for name, mask in masks.items():
            inits[name].CopyFrom(numpy_helper.from_array(weights[name] * mask, name))
    else:
        recipe["fine_tune"] = tuned
    total = zeros = 0
    for w in layouts:
        rows = w.rows(numpy_helper.to_array(inits[w.initializer]))
        if not is_2of4(rows):  # the pattern is the point of this candidate: never ship without
            raise UnsupportedError(f"weight {w.initializer} lost its 2:4 pattern")
        total, zeros = total + rows.size, zeros + int(rows.size - np.count_nonzero(rows))
    recipe["zero_fraction"] = round(zeros / total, 4)
    work.mkdir(parents=True, exist_ok=True)
    path = work / "model.onnx"
    partial = work / "model.onnx.partial"  # an interrupted save leaves no model.onnx behind
    onnx.save(model, str(partial))
    os.replace(partial, path)
    return Candidate(
        name="prune-2of4", kind="prune-2of4", path=path, recipe=recipe, notes=tuple(notes)
    )


# ---------------------------------------------------------------------------------------------
# channel pruning


def _example(model: onnx.ModelProto, sample: TrainingRows | None) -> list[np.ndarray]:
    """A few input rows to trace and check with: from ``sample``, else random values in the
    inputs' static shapes (a dynamic first dim taken as 2)."""
    constants = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in constants]
    if sample is not None:
        missing = [n for n in names if n not in sample.inputs]
        if missing:
            raise InvalidArgumentError(
                f"{sample.source}: has no data for the model input(s) {', '.join(missing)}"
            )
        return [np.array(sample.inputs[n][:_ROWS_FOR_CHECKS], dtype=np.float32) for n in names]
    random = np.random.default_rng(0)
    arrays = []
    for tensor in model.graph.input:
        if tensor.name not in names:
            continue
        dims = [d.dim_value for d in tensor.type.tensor_type.shape.dim]
        if any(d <= 0 for d in dims[1:]):
            raise CandidateSkipped(
                f"input '{tensor.name}' has dynamic dims besides the batch: give training data"
            )
        arrays.append(random.standard_normal([2, *dims[1:]]).astype(np.float32))
    return arrays


def _check_conversion(
    module: GraphModule, model: onnx.ModelProto, example: list[np.ndarray]
) -> None:
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    wanted = session.run(None, dict(zip(module.input_names, example, strict=True)))
    with torch.no_grad():
        got = module.run([torch.from_numpy(x) for x in example], module.output_names)
    for name, ref, value in zip(module.output_names, wanted, got, strict=True):
        error = float(np.max(np.abs(ref - value.numpy()))) if ref.size else 0.0
        if error > 1e-4 * max(1.0, float(np.max(np.abs(ref)))):
            raise CandidateSkipped(
                f"the graph converted to torch disagrees with ONNX Runtime on '{name}' "
                f"(max abs error {error:.3g})"
            )


def _output_layers(module: GraphModule) -> list[torch.nn.Module]:
    """The layers whose channels are the model's outputs: reached from an output back through
    steps that are not layers."""
    found: list[torch.nn.Module] = []
    pending = list(module.output_names)
    seen: set[str] = set()
    while pending:
        tensor = pending.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        step = module.producer(tensor)
        if step is None:
            continue
        if step.layer is not None:
            found.append(module.layers[step.layer])
        else:
            pending.extend(step.inputs)
    return found


def _dynamic_axes(model: onnx.ModelProto, names: list[str]) -> dict[str, dict[int, str]]:
    axes: dict[str, dict[int, str]] = {}
    for tensor in [*model.graph.input, *model.graph.output]:
        if tensor.name not in names:
            continue
        dims = tensor.type.tensor_type.shape.dim
        dynamic = {
            i: d.dim_param or f"{tensor.name}_dim{i}"
            for i, d in enumerate(dims)
            if d.dim_value <= 0
        }
        if dynamic:
            axes[tensor.name] = dynamic
    return axes


def export_onnx(
    module: torch.nn.Module,
    example: tuple[torch.Tensor, ...],
    path: Path,
    inputs: list[str],
    outputs: list[str],
    dynamic_axes: dict[str, dict[int, str]],
) -> None:
    """Write ``module`` as ONNX (opset 17) with these names and dynamic dims.

    Uses the TorchScript-based exporter (torch 2.9 and later warn that it is deprecated; it
    gives a plain graph and keeps the names given), its warnings silenced.
    """
    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            example,
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=dynamic_axes,
            opset_version=17,
            dynamo=False,
        )


def _torch_pruning() -> Any:
    """Torch-Pruning (it ships no type hints)."""
    return importlib.import_module("torch_pruning")


def _count(module: torch.nn.Module, example: tuple[torch.Tensor, ...]) -> tuple[int, int]:
    tp = _torch_pruning()
    macs, params = tp.utils.count_ops_and_params(module, example)
    return int(macs), int(params)


def prune_channels(
    model_path: Path,
    work: Path,
    ratio: float = 0.5,
    train: TrainingRows | None = None,
    *,
    sample: TrainingRows | None = None,
    output: str | None = None,
    tuning: FineTuning | None = None,
) -> Candidate:
    """The channel-pruned candidate of the ONNX model at ``model_path`` (``work/model.onnx``).

    ``ratio`` of the channels of every prunable layer go (their importance is the L2 norm of
    the weights coupled to each channel, summed over the group Torch-Pruning's dependency graph
    finds); ``sample`` (else ``train``, else random values) gives the rows to trace with.
    """
    if not 0.0 < ratio < 1.0:
        raise InvalidArgumentError(f"the channel ratio must be between 0 and 1, got {ratio}")
    _need("torch", "onnx", "torch_pruning")
    import onnx
    import onnxruntime as ort
    import torch

    from inferd.tools.optimize.finetune import FineTuning, fine_tune, model_inputs, objective_for
    from inferd.tools.optimize.torch_graph import to_torch

    model = onnx.load(str(model_path))
    try:
        module = to_torch(model)
    except UnsupportedError as exc:
        raise CandidateSkipped(
            f"channel pruning needs the graph as torch layers: {exc.message}"
        ) from None
    example_arrays = _example(model, sample or train)
    _check_conversion(module, model, example_arrays)
    example = tuple(torch.from_numpy(x) for x in example_arrays)
    baseline = copy.deepcopy(module)
    macs_before, params_before = _count(module, example)
    tp = _torch_pruning()
    pruner = tp.pruner.MetaPruner(
        module,
        example if len(example) > 1 else example[0],
        importance=tp.importance.GroupMagnitudeImportance(p=2),
        pruning_ratio=ratio,
        ignored_layers=_output_layers(module),
    )
    pruner.step()
    macs_after, params_after = _count(module, example)
    if params_after >= params_before:
        raise CandidateSkipped("no layer had channels that could be removed")
    recipe: dict[str, object] = {
        "method": f"channel pruning: {ratio:.0%} of the channels of every Linear and Conv layer "
        "but the output layers removed, coupled layers shrunk together",
        "library": "torch-pruning (MetaPruner, GroupMagnitudeImportance p=2)",
        "ratio": ratio,
        "params_before": params_before,
        "params_after": params_after,
        "macs_before": macs_before,
        "macs_after": macs_after,
    }
    notes = [
        f"{ratio:.0%} of the channels removed: {params_after:,} of {params_before:,} parameters "
        f"and {macs_after:,} of {macs_before:,} multiply-adds per row remain."
    ]
    if train is not None:
        settings = tuning or FineTuning()
        inputs = model_inputs(module, train, settings.max_rows)
        objective = objective_for(module, baseline, train, inputs, output)
        recipe["fine_tune"] = fine_tune(module, objective, inputs, settings).recipe()
    else:
        notes.append("not fine-tuned: no training data was given")
    work.mkdir(parents=True, exist_ok=True)
    path, partial = work / "model.onnx", work / "model.onnx.partial"
    names = module.input_names + module.output_names
    axes = _dynamic_axes(model, names)
    export_onnx(module, example, partial, module.input_names, module.output_names, axes)
    session = ort.InferenceSession(str(partial), providers=["CPUExecutionProvider"])
    if [i.name for i in session.get_inputs()] != module.input_names or [
        o.name for o in session.get_outputs()
    ] != module.output_names:
        raise UnsupportedError("the pruned model's export changed its input or output names")
    os.replace(partial, path)
    return Candidate(
        name=f"prune-channels-{round(ratio * 100)}",
        kind="prune-channels",
        path=path,
        recipe=recipe,
        notes=tuple(notes),
    )
