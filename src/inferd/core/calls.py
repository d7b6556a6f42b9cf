"""Calling a model from inside the server (no network hop): the type both ensembles and
models that call other models receive.

The repository implements it (``inferd.repository.calls.InProcessCaller``): it resolves the
model version, checks the request against its configuration and submits it to that version's
scheduler, so the call batches with the model's other traffic.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from inferd.core.inference import InferRequest, InferResponse
from inferd.core.model_spec import ModelSpec

__all__ = ["ModelCaller"]


class ModelCaller(Protocol):
    """``await caller(request)``: every output of the model addressed by ``request``.

    ``await caller.outputs(request, version)`` is the lean form for callers that know the
    version as a number (None: the latest READY one) and want only the arrays. A caller that
    has already checked ``request`` against a model's configuration passes that ``ModelSpec``
    as ``checked`` with the batch size it found (``rows``); the check is then skipped if the
    version the call resolves still serves that very spec, and done as usual otherwise."""

    async def __call__(self, request: InferRequest) -> InferResponse: ...

    async def outputs(
        self,
        request: InferRequest,
        version: int | None,
        checked: ModelSpec | None = None,
        rows: int = 1,
    ) -> dict[str, np.ndarray[Any, Any]]: ...
