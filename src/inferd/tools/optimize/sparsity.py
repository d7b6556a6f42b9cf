"""2:4 structured sparsity of ONNX weights: which weights it applies to, how their reduction
dimension lies, the masks (``torch.ao.pruning``'s ``WeightNormSparsifier`` with 1x4 blocks and
2 zeros per block keeps the 2 largest in magnitude of every 4 consecutive weights along the
reduction dimension), the check of the pattern, and fine-tuning with the zeros held.
:func:`inferd.tools.optimize.prune.prune_2of4` builds the candidate from these."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

    from inferd.tools.optimize.finetune import FineTuning, TrainingRows

__all__ = [
    "CPU_SPARSITY_NOTE",
    "WeightLayout",
    "is_2of4",
    "sparse_weights",
    "tune_masked",
    "two_of_four_masks",
]

CPU_SPARSITY_NOTE = (
    "2:4 sparsity keeps the zeros in the weight tensors: a CPU runtime stores and multiplies "
    "them like any other value, so this candidate saves no time or memory on this machine; the "
    "pattern pays on GPUs with sparse tensor cores (NVIDIA Ampere and later)."
)


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


def tune_masked(
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
