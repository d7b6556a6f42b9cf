"""Shaping a model's outputs into what a request asked for: the one place that does it.

A model (or the response cache) produces raw outputs; observers see those. What a caller then
receives is the request's selection of them, in the order it named them, with the
classification extension applied (``class_count``): :func:`shape_outputs`. Runtimes that can
skip unrequested outputs ask :func:`requested_names` / :func:`union_outputs` which to compute.
Every function here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from inferd.core.classification import classify
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import InvalidArgumentError

__all__ = ["requested_names", "shape_outputs", "union_outputs"]

Outputs = dict[str, np.ndarray[Any, Any]]

_NO_LABELS: Mapping[str, list[str]] = {}


def shape_outputs(
    request: InferRequest,
    spec: ModelSpec,
    outputs: Mapping[str, np.ndarray[Any, Any]],
    labels: Mapping[str, list[str]] = _NO_LABELS,
    *,
    strict: bool = True,
) -> Outputs:
    """What ``request`` receives out of the raw ``outputs`` of the model ``spec``: every
    configured output (in model order) when it names none, else the ones it names, in its
    order, each classified when it asks for ``class_count``. ``outputs`` is never changed.

    A named output the model did not produce is refused (``InvalidArgumentError``) when
    ``strict``; a decoupled model's partial response passes ``strict=False`` and such an
    output is left out."""
    wanted = request.outputs
    if wanted is None:
        return {t.name: outputs[t.name] for t in spec.outputs if t.name in outputs}
    selected: Outputs = {}
    for output in wanted:
        name = output.name
        array = outputs.get(name)
        if array is None:
            if strict:
                raise InvalidArgumentError(
                    f"model '{spec.name}' did not produce requested output '{name}'"
                )
            continue
        if output.classification > 0:
            array = classify(
                array,
                output.classification,
                batched=spec.max_batch_size > 0,
                labels=labels.get(name),
            )
        selected[name] = array
    return selected


def requested_names(request: InferRequest, all_names: Sequence[str]) -> list[str]:
    """The outputs one request asked for (all of them when it named none), in model order."""
    if request.outputs is None:
        return list(all_names)
    wanted = {o.name for o in request.outputs}
    return [n for n in all_names if n in wanted]


def union_outputs(requests: Sequence[InferRequest], all_names: Sequence[str]) -> list[str]:
    """The outputs any request of a batch asked for, in model order."""
    wanted: set[str] = set()
    for request in requests:
        if request.outputs is None:
            return list(all_names)
        wanted.update(o.name for o in request.outputs)
    return [n for n in all_names if n in wanted]
