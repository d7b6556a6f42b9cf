"""The batch dimension between an ensemble and its steps, as Triton adds and strips it (pure).

An ensemble tensor either carries a batch dimension (an input of a batching ensemble, an output
of a batching step model) or not (an input of an ensemble with ``max_batch_size: 0``, an output
of a non-batching step). Where a tensor goes to a reader of the other kind, Triton's ensemble
scheduler reshapes it (``EnsembleContext::ReshapeTensorDims``), and so does :func:`reshape`:

* to a batching reader (a step model's input, or the output of a batching ensemble), an
  unbatched tensor whose shape matches the reader's configured dims gains a batch dimension of
  1 (``[4]`` becomes ``[1, 4]``); one that does not match is passed on as it is;
* to a non-batching reader, a batched tensor of batch size 1 whose shape does not match the
  reader's dims loses its batch dimension (``[1, 4]`` becomes ``[4]``); one that matches (the
  reader takes the whole tensor) is passed on as it is.

Whether a tensor is batched is known when the ensemble loads, so :func:`plan_reshapes` lists,
once, only the reads where the two kinds differ; every other read passes the array untouched.
Reshaping makes a view, never a copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.core.model_spec import ModelSpec
from inferd.scheduling.ensemble_graph import EnsembleGraph

__all__ = ["Reshape", "ReshapePlan", "plan_reshapes", "reshape"]


@dataclass(frozen=True, slots=True)
class Reshape:
    """One read across kinds: ``name`` (a step model's input, or an ensemble output) whose
    configured ``dims`` (batch excluded) a tensor meets; ``add`` when the reader batches and
    the tensor does not, else the reader does not batch and the tensor does."""

    name: str
    dims: tuple[int, ...]
    add: bool


@dataclass(frozen=True, slots=True)
class ReshapePlan:
    """Per step, the reshapes of its inputs; then those of the ensemble's outputs."""

    steps: tuple[tuple[Reshape, ...], ...]
    outputs: tuple[Reshape, ...]

    @property
    def empty(self) -> bool:
        return not self.outputs and not any(self.steps)


def _matches(dims: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Triton's ``CompareDimsWithWildcard``: the same rank, each dim equal or -1 on a side."""
    return len(dims) == len(shape) and all(
        d == s or d == -1 or s == -1 for d, s in zip(dims, shape, strict=True)
    )


def reshape(array: np.ndarray[Any, Any], how: Reshape) -> np.ndarray[Any, Any]:
    """``array`` as the reader described by ``how`` receives it (a view, or ``array``)."""
    shape = array.shape
    if how.add:
        if _matches(how.dims, shape):
            return array.reshape((1, *shape))
    elif shape and shape[0] == 1 and not _matches(how.dims, shape):
        return array.reshape(shape[1:])
    return array


def plan_reshapes(
    graph: EnsembleGraph, spec: ModelSpec, step_specs: Sequence[ModelSpec]
) -> ReshapePlan:
    """The reads of ensemble ``spec`` (whose ``graph`` calls the models ``step_specs``, one per
    step) where a tensor's kind and its reader's differ."""
    ensemble_batching = spec.max_batch_size > 0
    batched = dict.fromkeys(graph.inputs, ensemble_batching)
    for step, model in zip(graph.steps, step_specs, strict=True):
        for tensor in step.output_map.values():
            batched[tensor] = model.max_batch_size > 0
    steps: list[tuple[Reshape, ...]] = []
    for step, model in zip(graph.steps, step_specs, strict=True):
        step_batching = model.max_batch_size > 0
        reads: list[Reshape] = []
        for model_input, tensor in step.input_map.items():
            declared = model.input_by_name.get(model_input)
            if declared is not None and batched.get(tensor, step_batching) != step_batching:
                reads.append(Reshape(model_input, tuple(declared.dims), step_batching))
        steps.append(tuple(reads))
    outputs = tuple(
        Reshape(out.name, tuple(out.dims), ensemble_batching)
        for out in spec.outputs
        if batched.get(out.name, ensemble_batching) != ensemble_batching
    )
    return ReshapePlan(tuple(steps), outputs)
