"""What watches answered requests without being in their way: the payload log, the drift
monitor. The engine calls every observer on the event loop after a request is answered; an
observer only samples and hands the data on (a bounded queue, a worker of its own), and must
never raise into the request or make it wait."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec

__all__ = ["InferenceObserver", "ModelOutputs"]

# the raw arrays a model produced for one request, by output name
ModelOutputs = Mapping[str, np.ndarray[Any, Any]]


class InferenceObserver(Protocol):
    def observe(
        self, spec: ModelSpec, version: int, request: InferRequest, outputs: ModelOutputs
    ) -> None:
        """``request`` was answered by ``version`` of the model ``spec`` with ``outputs``: the
        raw arrays the model produced for it (or the response cache holds for it: then every
        output of the model), before any selection or classification is shaped from them
        (:mod:`inferd.core.shaping`); read them, never change them, and return at once."""
        ...
