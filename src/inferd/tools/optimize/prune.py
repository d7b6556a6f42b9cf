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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.errors import InvalidArgumentError, UnavailableError, UnsupportedError
from inferd.tools.optimize.candidate import Candidate, CandidateSkipped

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

CPU_SPARSITY_NOTE = (
    "2:4 sparsity keeps the zeros in the weight tensors: a CPU runtime stores and multiplies "
    "them like any other value, so this candidate saves no time or memory on this machine; the "
    "pattern pays on GPUs with sparse tensor cores (NVIDIA Ampere and later)."
)
_ROWS_FOR_CHECKS = 16


def _need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise UnavailableError(
            f"pruning needs {', '.join(missing)}: pip install 'inferd[optimize]'"
        )


# ---------------------------------------------------------------------------------------------
# 2:4 sparsity


@dataclass(frozen=True)
class WeightLayout:
    """A weight initializer and how its reduction dimension lies: ``kn`` a [K, N] matrix
    (MatMul, Gemm without transB), ``nk`` an [N, K] one (Gemm with transB), ``conv`` a
    [M, C/group, kernel...] filter whose reduction groups run along C."""

    initializer: str
    layout: str

    def rows(self, weight: np.ndarray) -> np.ndarray:
        """The weight as a 2-D [rows, K] view, K the reduction dimension, contiguous."""
        if self.layout == "kn":
            return np.ascontiguousarray(weight.T)
        if self.layout == "nk":
            return weight
        moved = np.moveaxis(weight, 1, -1)  # [M, kernel..., C]
        return np.ascontiguousarray(moved.reshape(-1, weight.shape[1]))

    def unrows(self, rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """Back from :meth:`rows` to the weight's own ``shape``."""
        if self.layout == "kn":
            return np.ascontiguousarray(rows.T)
        if self.layout == "nk":
            return rows
        moved_shape = (shape[0], *shape[2:], shape[1])
        return np.ascontiguousarray(np.moveaxis(rows.reshape(moved_shape), -1, 1))


def sparse_weights(model: onnx.ModelProto) -> tuple[list[WeightLayout], list[str]]:
    """The float32 weights 2:4 applies to, and the ones it leaves (each with the reason)."""
    from onnx import helper

    inits = {i.name: i for i in model.graph.initializer}
    chosen: list[WeightLayout] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for node in model.graph.node:
        if node.op_type not in ("MatMul", "Gemm", "Conv") or len(node.input) < 2:
            continue
        name = node.input[1]
        init = inits.get(name)
        if init is None or name in seen:
            continue
        seen.add(name)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        dims = list(init.dims)
        if node.op_type == "Conv":
            layout, reduction = "conv", dims[1] if len(dims) > 2 else 0
        elif len(dims) == 2 and not attrs.get("transA"):
            transposed = node.op_type == "Gemm" and bool(attrs.get("transB"))
            layout, reduction = ("nk", dims[1]) if transposed else ("kn", dims[0])
        else:
            skipped.append(f"{name} ({len(dims)}-D weight)")
            continue
        if init.data_type != 1:  # FLOAT
            skipped.append(f"{name} (not float32)")
        elif reduction % 4:
            skipped.append(f"{name} (reduction dimension {reduction} is not a multiple of 4)")
        else:
            chosen.append(WeightLayout(name, layout))
    return chosen, skipped


def two_of_four_masks(rows: list[np.ndarray]) -> list[np.ndarray]:
    """For each [rows, K] weight (K a multiple of 4), the mask that keeps the 2 largest in
    magnitude of every 4 consecutive values along K (True = kept)."""
    import torch
    from torch.ao.pruning.sparsifier.weight_norm_sparsifier import WeightNormSparsifier

    class _Holder(torch.nn.Module):
        def __init__(self, weight: np.ndarray) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.from_numpy(np.array(weight, np.float32)))

    holders = torch.nn.ModuleList([_Holder(r) for r in rows])
    sparsifier = WeightNormSparsifier(
        sparsity_level=1.0, sparse_block_shape=(1, 4), zeros_per_block=2
    )
    prepare: Any = sparsifier.prepare  # untyped in torch
    prepare(holders, [{"tensor_fqn": f"{i}.weight"} for i in range(len(rows))])
    sparsifier.step()
    masks: list[np.ndarray] = []
    for holder in holders:
        parametrizations: Any = holder.parametrizations
        masks.append(parametrizations.weight[0].mask.detach().numpy().astype(bool))
    return masks


def is_2of4(rows: np.ndarray) -> bool:
    """Whether every group of 4 consecutive values along the last axis has at least 2 zeros."""
    groups = rows.reshape(rows.shape[0], -1, 4)
    return bool(np.all(np.count_nonzero(groups, axis=-1) <= 2))


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
            tuned = _tune_masked(model, masks, train, output, tuning)
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


def _tune_masked(
    model: onnx.ModelProto,
    masks: dict[str, np.ndarray],
    train: TrainingRows,
    output: str | None,
    tuning: FineTuning | None,
) -> dict[str, object]:
    """Fine-tune with the zeros held (``torch.nn.utils.prune.custom_from_mask``) and write the
    weights back into ``model``; the recipe's fine-tuning figures."""
    import torch
    from torch.nn.utils import prune

    from inferd.tools.optimize.finetune import FineTuning, fine_tune, model_inputs, objective_for
    from inferd.tools.optimize.torch_graph import to_torch

    hold: Any = prune.custom_from_mask  # untyped in torch
    release: Any = prune.remove
    settings = tuning or FineTuning()
    module = to_torch(model)
    baseline = copy.deepcopy(module)
    by_initializer = {s.initializer: (p, s) for p, s in module.parameter_sources().items()}
    held = []
    for name, mask in masks.items():
        param, source = by_initializer[name]
        layer = module.get_submodule(param.rsplit(".", 1)[0])
        layer_mask = mask.T if source.transpose else mask
        hold(layer, "weight", torch.from_numpy(np.array(layer_mask)))
        held.append(layer)
    inputs = model_inputs(module, train, settings.max_rows)
    objective = objective_for(module, baseline, train, inputs, output)
    result = fine_tune(module, objective, inputs, settings)
    for layer in held:
        release(layer, "weight")
    module.write_back(model)
    return result.recipe()


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
