"""Helpers for runtimes that execute several requests as one batch along the first dimension."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.core.inference import InferRequest

Array = np.ndarray[Any, Any]


def can_concatenate(requests: Sequence[InferRequest]) -> bool:
    """True when every request has the same inputs with equal non-batch dims and dtypes."""
    first = requests[0].inputs
    for request in requests[1:]:
        inputs = request.inputs
        if inputs.keys() != first.keys():
            return False
        for name, array in inputs.items():
            ref = first[name]
            if array.shape[1:] != ref.shape[1:] or array.dtype != ref.dtype:
                return False
    return True


def concatenate_inputs(requests: Sequence[InferRequest]) -> tuple[dict[str, Array], list[int]]:
    """One feed per input (the requests stacked on axis 0) and each request's row count."""
    names = list(requests[0].inputs)
    rows = [next(iter(r.inputs.values())).shape[0] if r.inputs else 1 for r in requests]
    feeds = {name: np.concatenate([r.inputs[name] for r in requests], axis=0) for name in names}
    return feeds, rows


def split_outputs(outputs: dict[str, Array], rows: Sequence[int]) -> list[dict[str, Array]]:
    """Cut batched outputs back into one dict per request (views, no copies)."""
    bounds = np.cumsum(rows)[:-1]
    per_request: list[dict[str, Array]] = [{} for _ in rows]
    for name, array in outputs.items():
        for target, part in zip(per_request, np.split(array, bounds, axis=0), strict=True):
            target[name] = part
    return per_request


def union_outputs(requests: Sequence[InferRequest], all_names: Sequence[str]) -> list[str]:
    """The outputs any request of the batch asked for, in model order."""
    wanted: set[str] = set()
    for request in requests:
        if request.outputs is None:
            return list(all_names)
        wanted.update(o.name for o in request.outputs)
    return [n for n in all_names if n in wanted]
