"""Auto-complete for ``torch.export`` programs (PROTOCOL.md §5.7).

An exported program records its tensors' data types and shapes, with dynamic dimensions kept
symbolic, so inputs, outputs and batching can be read from it. Inputs take ``forward``'s
argument names; outputs take the keys of a returned dict, else ``OUTPUT__<index>``. Programs
whose inputs or outputs are not a flat list of tensors are refused with a clear message.
TorchScript files carry no such signature: their configuration must be written by hand.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch

from inferd.backends.autofill import add_tensors, apply_batching
from inferd.backends.torch.tensors import CONFIG_TYPES
from inferd.errors import ConfigError


def _dims(value: Any) -> list[int]:
    return [d if isinstance(d, int) else -1 for d in value.shape]


def _model_tensors(named: list[tuple[str, Any]], where: str) -> list[tuple[str, str, list[int]]]:
    tensors = []
    for name, value in named:
        config_type = CONFIG_TYPES.get(value.dtype)
        if config_type is None:
            raise ConfigError(f"unable to auto-complete {where}: {name} has dtype {value.dtype}")
        tensors.append((name, config_type, _dims(value)))
    return tensors


def _program_io(program: Any, where: str) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(name, fake tensor) of every user input and output, or a ConfigError saying why not."""
    from torch.export.graph_signature import InputKind, OutputKind, TensorArgument

    values = {node.name: node.meta.get("val") for node in program.graph.nodes}
    signature = program.graph_signature
    in_args = [s.arg for s in signature.input_specs if s.kind == InputKind.USER_INPUT]
    out_args = [s.arg for s in signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    params = list(inspect.signature(program.module().forward).parameters.values())
    flat_params = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)
    if not flat_params or len(params) != len(in_args):
        raise ConfigError(
            f"unable to auto-complete {where}: forward() does not take one tensor per "
            "argument; list the inputs and outputs in config.pbtxt"
        )
    inputs: list[tuple[str, Any]] = []
    for param, arg in zip(params, in_args, strict=True):
        value = values.get(arg.name) if isinstance(arg, TensorArgument) else None
        if not isinstance(value, torch.Tensor):
            raise ConfigError(
                f"unable to auto-complete {where}: argument '{param.name}' is not a tensor"
            )
        inputs.append((param.name, value))
    out_spec = program.call_spec.out_spec
    if out_spec is None or out_spec.is_leaf():
        names = ["OUTPUT__0"]
    elif all(child.is_leaf() for child in out_spec.children()) and out_spec.type in (
        tuple,
        list,
        dict,
    ):
        names = (
            [str(k) for k in out_spec.context]
            if out_spec.type is dict
            else [f"OUTPUT__{i}" for i in range(out_spec.num_leaves)]
        )
    else:
        names = []
    out_values = [values.get(a.name) if isinstance(a, TensorArgument) else None for a in out_args]
    if len(names) != len(out_values) or not all(isinstance(v, torch.Tensor) for v in out_values):
        raise ConfigError(
            f"unable to auto-complete {where}: forward() must return a tensor, a flat tuple or "
            "list of tensors, or a flat dict of tensors; list the outputs in config.pbtxt"
        )
    return inputs, list(zip(names, out_values, strict=True))


def complete_exported(config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
    """Fill ``config``'s missing inputs, outputs and batching from an exported program."""
    where = f"model '{config.name or model_path.parent.parent.name}' from {model_path}"
    try:
        program = torch.export.load(str(model_path))
    except Exception as exc:
        raise ConfigError(f"unable to auto-complete {where}: {exc}") from exc
    inputs, outputs = _program_io(program, where)
    can_batch = all(
        v.dim() >= 1 and not isinstance(v.shape[0], int) for _, v in (*inputs, *outputs)
    )
    batching = apply_batching(
        config,
        can_batch=can_batch,
        default_max_batch_size=default_max_batch_size,
        where=where,
        hint=" (export it with a dynamic first dimension)",
    )
    if len(config.input) == 0:
        add_tensors(config.input, _model_tensors(inputs, where), batching)
    if len(config.output) == 0:
        add_tensors(config.output, _model_tensors(outputs, where), batching)
