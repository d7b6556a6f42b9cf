"""Checks of a decoded request against the model it is addressed to.

Codecs already guarantee that every tensor's data matches its own shape and datatype; what is
left is what only the model knows: names, datatypes, dims and the batch bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.core.datatypes import from_dtype
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec, TensorSpec
from inferd.errors import InvalidArgumentError


def _shape_str(shape: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _dims_match(got: tuple[int, ...], want: tuple[int, ...]) -> bool:
    if len(got) != len(want):
        return False
    return all(w == -1 or g == w for g, w in zip(got, want, strict=True))


def validate_request(request: InferRequest, spec: ModelSpec) -> int:
    """Raise :class:`InvalidArgumentError` naming the problem; return the batch size (1 if none)."""
    inputs = request.inputs
    by_name = spec.input_by_name
    for name in inputs:
        if name not in by_name:
            raise InvalidArgumentError(
                f"unexpected inference input '{name}' for model '{spec.name}'"
            )
    # every name is known and a dict holds each once: as many as the model has means none missing
    missing = (
        []
        if len(inputs) == len(spec.inputs)
        else [t.name for t in spec.inputs if not t.optional and t.name not in inputs]
    )
    if missing:
        raise InvalidArgumentError(
            f"expected {len(spec.inputs)} inputs but got {len(inputs)} inputs for model "
            f"'{spec.name}'. Got input(s) {sorted(inputs)}, but missing required input(s) "
            f"{missing}. Please provide all required input(s)."
        )
    batch = 1
    first = True
    for name, array in inputs.items():
        tensor: TensorSpec = by_name[name]
        if array.dtype != tensor.datatype.dtype:
            raise InvalidArgumentError(
                f"unexpected datatype for inference input '{name}' of model '{spec.name}': "
                f"got {_wire_name(array.dtype)}, expecting {tensor.datatype.name}"
            )
        shape = array.shape
        if spec.max_batch_size > 0:
            if len(shape) == 0:
                raise InvalidArgumentError(
                    f"input '{name}' of model '{spec.name}' has no batch dimension: "
                    f"expected shape {_shape_str(tensor.full_shape(spec.max_batch_size))}"
                )
            this_batch = shape[0]
            if first:
                batch, first = this_batch, False
            elif this_batch != batch:
                raise InvalidArgumentError(
                    f"inputs of model '{spec.name}' disagree on the batch size: input '{name}' "
                    f"has {this_batch}, another has {batch}"
                )
            inner = shape[1:]
        else:
            inner = shape
        if (
            inner != tensor.dims
            and not tensor.allow_ragged_batch
            and not _dims_match(inner, tensor.dims)
        ):
            raise InvalidArgumentError(
                f"unexpected shape for input '{name}' for model '{spec.name}'. Expected "
                f"{_shape_str(tensor.full_shape(spec.max_batch_size))}, got {_shape_str(shape)}"
            )
    if spec.max_batch_size > 0 and not (1 <= batch <= spec.max_batch_size) and inputs:
        raise InvalidArgumentError(
            f"inference request batch-size must be <= {spec.max_batch_size} for "
            f"'{spec.name}', got {batch}: send at most {spec.max_batch_size} rows per request, "
            "or raise max_batch_size in the model's config.pbtxt (or in the 'config' of a load "
            "request, in explicit model control mode) and load the model again"
            if batch > 0
            else f"inference request to model '{spec.name}' has batch size 0"
        )
    if request.outputs is not None:
        for out in request.outputs:
            if out.name not in spec.output_by_name:
                raise InvalidArgumentError(
                    f"unexpected inference output '{out.name}' for model '{spec.name}'"
                )
    return batch


def _wire_name(dtype: np.dtype[Any]) -> str:
    try:
        return from_dtype(dtype).name
    except InvalidArgumentError:
        return str(dtype)
