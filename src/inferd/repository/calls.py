"""Calling a model in process: the repository's implementation of :class:`ModelCaller`.

Ensembles run their steps through it, and so can any model that calls other models: the call
resolves the model version among the READY ones, checks the request against the version's
configuration and submits it to the version's own scheduler, so it batches with the model's
other traffic. Outputs come back as the arrays the model produced (no copy).
"""

from __future__ import annotations

from collections.abc import Callable

from inferd.core.inference import InferRequest, InferResponse
from inferd.core.validation import validate_request
from inferd.errors import InvalidArgumentError
from inferd.repository.manager_types import ServingModel

__all__ = ["InProcessCaller"]


class InProcessCaller:
    """``await caller(request)`` runs ``request`` on the model it names, on this server.

    ``get`` resolves a model name and version (None: the latest READY one) to a serving
    version, raising ``NotFoundError`` as the engine does.
    """

    __slots__ = ("_get",)

    def __init__(self, get: Callable[[str, int | None], ServingModel]) -> None:
        self._get = get

    async def __call__(self, request: InferRequest) -> InferResponse:
        version = request.model_version
        if version and not version.isdigit():
            raise InvalidArgumentError(
                f"model version '{version}' of model '{request.model_name}' is not an integer"
            )
        model = self._get(request.model_name, int(version) if version else None)
        rows = validate_request(request, model.spec)
        outputs = await model.scheduler.submit(request, rows)
        return InferResponse(
            model_name=model.spec.name,
            model_version=str(model.version),
            outputs=outputs,
            id=request.id,
        )
