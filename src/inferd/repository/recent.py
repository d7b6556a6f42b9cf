"""The last few requests each model answered, kept to warm up its next version.

:class:`RecentRequests` is an :class:`~inferd.core.observe.InferenceObserver`: the engine hands
it every answered request on the event loop, and it appends a reference to a bounded ring per
model (no copy, no lock; a request whose inputs and string parameters are larger than
``max_request_bytes`` is not kept). When a new version or configuration of the model loads,
the manager takes the ring's requests (:meth:`RecentRequests.sample`) and the loader runs them
on the new instances before they serve (``repository/warmup.py``), unless the config has its
own ``model_warmup``.

Sequence models and ensembles are not kept: a request of a sequence makes sense only in its
sequence, and an ensemble has no instances of its own (its steps keep their own requests).
"""

from __future__ import annotations

import mmap
from collections import deque
from typing import Any

import numpy as np

from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.core.observe import ModelOutputs

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "RecentRequests"]

DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024


class RecentRequests:
    """The last ``per_model`` requests answered by each model, by reference."""

    __slots__ = ("_max_bytes", "_per_model", "_rings")

    def __init__(
        self, per_model: int, *, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    ) -> None:
        if per_model < 1:
            raise ValueError("per_model must be at least 1")
        self._per_model = per_model
        self._max_bytes = max_request_bytes
        self._rings: dict[str, deque[InferRequest]] = {}

    @property
    def per_model(self) -> int:
        return self._per_model

    def observe(
        self, spec: ModelSpec, version: int, request: InferRequest, outputs: ModelOutputs
    ) -> None:
        if spec.sequence_batching is not None or spec.is_ensemble:
            return
        size = len(request.id)  # the codecs bound ids; string parameters only by the body size
        for value in request.parameters.values():
            if isinstance(value, str):
                size += len(value)
        for array in request.inputs.values():
            size += array.nbytes
        if size > self._max_bytes:
            return
        ring = self._rings.get(spec.name)
        if ring is None:
            ring = self._rings[spec.name] = deque(maxlen=self._per_model)
        ring.append(request)

    def sample(self, name: str) -> list[InferRequest]:
        """The requests kept for model ``name``, oldest first, leaving out those whose inputs
        are still windows of a client's shared-memory region (the client may have written
        other data there since)."""
        ring = self._rings.get(name)
        if not ring:
            return []
        return [r for r in ring if not any(_in_shared_memory(a) for a in r.inputs.values())]

    def forget(self, name: str) -> None:
        """Drop what is kept for ``name`` (the model left the server)."""
        self._rings.pop(name, None)


def _in_shared_memory(array: np.ndarray[Any, Any]) -> bool:
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)
