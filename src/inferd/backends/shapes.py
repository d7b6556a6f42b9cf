"""One reshape rule between the configuration's tensors and the model's, for every runtime.

A config tensor may give ``reshape``: the model sees ``[batch] + reshape`` where the request has
``[batch] + dims`` (and the output goes back the other way). A model input of rank 0 takes a
request's one-element ``[1]``; a rank-0 output is answered as ``dims`` (``[1]`` if variable).

A request that does not fit is the client's error (``InvalidInputError``); an output that does
not fit is the model's (``InternalError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.core.model_spec import TensorSpec
from inferd.errors import InternalError, InvalidInputError

Array = np.ndarray[Any, Any]


def refit(array: Array, batched: bool, source: Sequence[int], target: Sequence[int]) -> Array:
    """``[batch] + source`` reshaped to ``[batch] + target``; ``ValueError`` if it cannot be.

    One variable dimension in ``target`` takes what the element count leaves for it; several
    take, in order, the sizes at the variable positions of ``source``. An ambiguous ``target``
    (several -1 that ``source`` cannot fill) leaves the array as it is, for the runtime's own
    shape check to judge."""
    lead = array.shape[:1] if batched else ()
    variable = list(target).count(-1)
    if variable <= 1:
        return array.reshape(*lead, *target)
    inner = array.shape[1:] if batched else array.shape
    if len(inner) != len(source):
        return array
    sizes = [inner[i] for i, d in enumerate(source) if d == -1]
    if len(sizes) != variable:
        return array
    fill = iter(sizes)
    return array.reshape(*lead, *(next(fill) if d == -1 else d for d in target))


def to_model(
    array: Array, tensor: TensorSpec, batched: bool, model_rank: int | None = None
) -> Array:
    """A request tensor in the shape the model takes (``model_rank``: None when unknown)."""
    if tensor.reshape is not None:
        try:
            return refit(array, batched, tensor.dims, tensor.reshape)
        except ValueError as exc:
            raise InvalidInputError(
                f"input '{tensor.name}' with shape {list(array.shape)} cannot be reshaped to "
                f"{list(tensor.reshape)}: {exc}"
            ) from None
    if model_rank == 0 and array.shape == (1,):
        return array.reshape(())
    return array


def to_config(array: Array, tensor: TensorSpec, batched: bool, model: str) -> Array:
    """A model output in the shape the configuration gives."""
    try:
        if tensor.reshape is not None:
            return refit(array, batched, tensor.reshape, tensor.dims)
        if array.ndim == 0:
            return array.reshape(tensor.dims if -1 not in tensor.dims else (1,))
    except ValueError as exc:
        raise InternalError(
            f"model '{model}' returned output '{tensor.name}' with shape {list(array.shape)}, "
            f"which does not fit dims {list(tensor.dims)}: {exc}"
        ) from None
    return array


__all__ = ["refit", "to_config", "to_model"]
