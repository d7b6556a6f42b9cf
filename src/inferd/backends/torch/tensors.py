"""How config tensors meet ``forward``: argument positions, result selection, dtype conversion.

Inputs bind to ``forward``'s positional arguments: by argument name when every configured input
is named after one, otherwise by Triton's ``<name>__<index>`` convention (``INPUT__0``,
``INPUT__1``, ...). Outputs are taken from what ``forward`` returns: a dict by key; a tuple or
list by the ``__<index>`` suffix of the output name (or, for names without one, their position
in the configuration); a single tensor when the configuration has exactly one output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import torch

from inferd.backends import shapes
from inferd.core.model_spec import ModelSpec, TensorSpec
from inferd.errors import ConfigError, InternalError

Array = np.ndarray[Any, Any]

_INDEXED = re.compile(r"^(.*)__(\d+)$")

# protocol datatype name -> torch dtype (BYTES has no torch equivalent)
TORCH_DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
    "UINT16": torch.uint16,
    "UINT32": torch.uint32,
    "UINT64": torch.uint64,
    "INT8": torch.int8,
    "INT16": torch.int16,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "FP16": torch.float16,
    "FP32": torch.float32,
    "FP64": torch.float64,
    "BF16": torch.bfloat16,
}
CONFIG_TYPES: dict[torch.dtype, str] = {dt: f"TYPE_{name}" for name, dt in TORCH_DTYPES.items()}


def check_datatypes(spec: ModelSpec) -> None:
    for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
        for tensor in tensors:
            if tensor.datatype.name not in TORCH_DTYPES:
                raise ConfigError(
                    f"{kind} '{tensor.name}' has data type {tensor.datatype.config_name}, which "
                    "the pytorch backend cannot serve (torch has no string tensors)"
                )


def _index_suffix(name: str) -> int | None:
    match = _INDEXED.match(name)
    return int(match.group(2)) if match else None


@dataclass(frozen=True, slots=True)
class Signature:
    """What is known of ``forward``'s arguments (without ``self``)."""

    names: tuple[str, ...]
    required: int  # leading arguments without a default
    variadic: bool = False  # *args: any number of positional arguments


@dataclass(frozen=True, slots=True)
class InputBinding:
    tensor: TensorSpec
    position: int


@dataclass(frozen=True, slots=True)
class OutputBinding:
    tensor: TensorSpec
    index: int  # element of a returned tuple/list


def bind_inputs(spec: ModelSpec, signature: Signature | None) -> tuple[InputBinding, ...]:
    """Give every configured input its position in ``forward(*args)``."""
    names = [t.name for t in spec.inputs]
    by_arg = signature is not None and all(n in signature.names for n in names)
    bindings: list[InputBinding] = []
    for tensor in spec.inputs:
        if by_arg:
            assert signature is not None
            position: int | None = signature.names.index(tensor.name)
        else:
            position = _index_suffix(tensor.name)
        if position is None:
            known = f" ({', '.join(signature.names)})" if signature and signature.names else ""
            raise ConfigError(
                f"input '{tensor.name}' cannot be matched to an argument of the model's "
                f"forward(): name every input after a forward() argument{known}, or follow "
                "Triton's convention <name>__<index> (INPUT__0, INPUT__1, ...)"
            )
        bindings.append(InputBinding(tensor, position))
    positions = sorted(b.position for b in bindings)
    if positions != list(range(len(positions))):
        raise ConfigError(
            f"the inputs of model '{spec.name}' take forward() argument positions {positions}; "
            f"they must be 0 to {len(positions) - 1}, each once"
        )
    if signature is not None and not signature.variadic:
        if len(positions) > len(signature.names):
            raise ConfigError(
                f"model '{spec.name}' lists {len(positions)} inputs but its forward() takes "
                f"{len(signature.names)} argument(s): {', '.join(signature.names)}"
            )
        if len(positions) < signature.required:
            missing = ", ".join(signature.names[len(positions) : signature.required])
            raise ConfigError(
                f"the model configuration of '{spec.name}' is missing input(s) for forward() "
                f"argument(s) {missing}"
            )
    return tuple(sorted(bindings, key=lambda b: b.position))


def bind_outputs(spec: ModelSpec) -> tuple[OutputBinding, ...]:
    bindings = []
    for order, tensor in enumerate(spec.outputs):
        index = _index_suffix(tensor.name)
        bindings.append(OutputBinding(tensor, order if index is None else index))
    indices = [b.index for b in bindings]
    if len(set(indices)) != len(indices):
        raise ConfigError(
            f"the outputs of model '{spec.name}' map to returned positions {indices}; each "
            "position may be used once (name outputs <name>__<index>, e.g. OUTPUT__0)"
        )
    return tuple(bindings)


# -- numpy <-> torch ----------------------------------------------------------------------------


def to_torch(array: Array, tensor: TensorSpec, batched: bool) -> torch.Tensor:
    """Share the array's memory with a tensor (a copy only for read-only request buffers)."""
    array = shapes.to_model(array, tensor, batched)
    if not array.flags.writeable:
        # torch.from_numpy cannot mark a tensor read-only and warns; a copy is the safe way
        array = array.copy()
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def to_numpy(value: torch.Tensor, tensor: TensorSpec, batched: bool, model: str) -> Array:
    """A model output as the configuration describes it (dtype checked, reshape undone)."""
    want = TORCH_DTYPES[tensor.datatype.name]
    if value.dtype != want:
        raise InternalError(
            f"model '{model}' returned output '{tensor.name}' as {value.dtype}, but the model "
            f"configuration declares {tensor.datatype.config_name}"
        )
    if value.device.type != "cpu":
        value = value.cpu()
    if value.requires_grad:
        value = value.detach()
    if want == torch.bfloat16:
        array: Array = value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    else:
        array = value.numpy()
    return shapes.to_config(array, tensor, batched, model)


def select_outputs(
    result: Any, bindings: Sequence[OutputBinding], wanted: Sequence[str], model: str
) -> dict[str, torch.Tensor]:
    """Pick the wanted outputs out of whatever ``forward`` returned."""
    chosen: dict[str, torch.Tensor] = {}
    by_name = {b.tensor.name: b for b in bindings}
    for name in wanted:
        binding = by_name[name]
        if isinstance(result, Mapping):
            if name not in result:
                keys = ", ".join(str(k) for k in result)
                raise InternalError(
                    f"model '{model}' returned a dict without output '{name}' (keys: {keys})"
                )
            value = result[name]
        elif isinstance(result, tuple | list):
            if binding.index >= len(result):
                raise InternalError(
                    f"model '{model}' returned {len(result)} value(s) but output '{name}' is "
                    f"taken from position {binding.index}"
                )
            value = result[binding.index]
        elif isinstance(result, torch.Tensor) and len(bindings) == 1:
            value = result
        else:
            raise InternalError(
                f"model '{model}' returned {type(result).__name__}; expected a tensor, a "
                f"tuple or list of tensors, or a dict of tensors for {len(bindings)} output(s)"
            )
        if not isinstance(value, torch.Tensor):
            raise InternalError(
                f"model '{model}' returned {type(value).__name__} for output '{name}', not a tensor"
            )
        chosen[name] = value
    return chosen
