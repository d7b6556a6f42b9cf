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

__all__ = ["ModelCaller"]


class ModelCaller(Protocol):
    """``await caller(request)``: every output of the model addressed by ``request``.

    ``await caller.outputs(request, version)`` is the lean form for callers that know the
    version as a number (None: the latest READY one) and want only the arrays."""

    async def __call__(self, request: InferRequest) -> InferResponse: ...

    async def outputs(
        self, request: InferRequest, version: int | None
    ) -> dict[str, np.ndarray[Any, Any]]: ...
