"""Checking a configuration's inputs and outputs against the tensors a model declares.

Runtimes that can read their model's signature (ONNX Runtime, OpenVINO) describe each model
tensor as a :class:`ModelTensor` and call :func:`check_io` at load, so a configuration that does
not fit its model fails with the same words whichever runtime reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from inferd.core.model_spec import ModelSpec, TensorSpec
from inferd.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ModelTensor:
    """A tensor as the model declares it."""

    data_type: str  # the model config data type (TYPE_FP32, ...), or the runtime's own name
    shape: tuple[int, ...] | None  # -1 for a dynamic dimension; None: the rank is dynamic too
    refusal: str = ""  # why the runtime cannot serve it ("" when it can), after "<kind> '<name>' "


def check_io(
    spec: ModelSpec, inputs: Mapping[str, ModelTensor], outputs: Mapping[str, ModelTensor]
) -> None:
    """Every configured tensor exists in the model with its data type and rank, and every model
    input is configured (sequence models get their control inputs from the batcher)."""
    for kind, tensors, declared in (
        ("input", spec.inputs, inputs),
        ("output", spec.outputs, outputs),
    ):
        for tensor in tensors:
            found = declared.get(tensor.name)
            if found is None:
                if kind == "input" and tensor.optional:
                    continue
                raise ConfigError(
                    f"unexpected {kind} '{tensor.name}' in the model configuration; the model "
                    f"has {kind}s: {', '.join(sorted(declared))}"
                )
            if found.refusal:
                raise ConfigError(f"{kind} '{tensor.name}' {found.refusal}")
            if found.data_type != tensor.datatype.config_name:
                raise ConfigError(
                    f"{kind} '{tensor.name}': the model expects data type {found.data_type} but "
                    f"the model configuration specifies {tensor.datatype.config_name}"
                )
            _check_rank(spec, kind, tensor, found)
    configured = {t.name for t in spec.inputs}
    missing = sorted(name for name in inputs if name not in configured)
    if missing and not spec.has_sequence_batching:
        raise ConfigError(f"the model configuration is missing model input(s) {', '.join(missing)}")


def _check_rank(spec: ModelSpec, kind: str, tensor: TensorSpec, found: ModelTensor) -> None:
    """The config's dims (plus the batch dim) must have the model's rank, unless reshaped."""
    if tensor.reshape is not None or found.shape is None:
        return
    batching = spec.max_batch_size > 0
    expected = len(tensor.dims) + (1 if batching else 0)
    rank = len(found.shape)
    if rank == expected or (rank == 0 and tensor.dims == (1,) and not batching):
        return
    hint = " (max_batch_size > 0 adds a leading batch dimension to the config's dims)"
    raise ConfigError(
        f"{kind} '{tensor.name}': the model has rank {rank} (shape {list(found.shape)}) but the "
        f"model configuration gives dims {list(tensor.dims)}, i.e. rank {expected}"
        + (hint if batching else "")
    )


__all__ = ["ModelTensor", "check_io"]
