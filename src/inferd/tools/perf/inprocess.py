"""A Transport with no network: requests go straight to an :class:`Engine` on the same loop.

The requests are built once in :meth:`InProcessTransport.prepare`; a channel's ``infer`` only
awaits ``engine.infer`` (or reads the whole stream of a decoupled model), so what is measured
is the server's own path, from the engine down to the runtime and back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inferd.codecs.statistics import to_json
from inferd.core.inference import InferRequest, RequestedOutput
from inferd.engine import Engine
from inferd.errors import InferdError, InvalidArgumentError
from inferd.tools.perf.inputs import batch_tensors
from inferd.tools.perf.metadata import select_statistics
from inferd.tools.perf.transport import (
    ModelInfo,
    PerfRequestError,
    RequestData,
    SequenceFlags,
    TensorInfo,
)


class InProcessChannel:
    """Calls the engine; any number may run at once (the engine has no connections)."""

    def __init__(self, transport: InProcessTransport) -> None:
        self._transport = transport
        self._engine = transport.engine
        self._requests = transport.requests

    async def infer(self, index: int, sequence: SequenceFlags | None = None) -> None:
        request = self._requests[index]
        if sequence is not None:
            request = InferRequest(
                model_name=request.model_name,
                inputs=request.inputs,
                model_version=request.model_version,
                outputs=request.outputs,
                parameters={
                    "sequence_id": sequence.sequence_id,
                    "sequence_start": sequence.start,
                    "sequence_end": sequence.end,
                },
            )
        try:
            if self._transport.decoupled:
                async for event in self._engine.stream_infer(request):
                    if event.error is not None:
                        raise PerfRequestError(event.error.message)
            else:
                await self._engine.infer(request)
        except PerfRequestError:
            raise
        except InferdError as exc:
            raise PerfRequestError(exc.message) from exc

    async def close(self) -> None:
        pass


class InProcessTransport:
    """One model of an engine running on this event loop."""

    name = "in-process"

    def __init__(self, engine: Engine, model: str, version: str = "") -> None:
        self.engine = engine
        self._model = model
        self._version = version
        self.requests: list[InferRequest] = []
        self.decoupled = False
        self._info: ModelInfo | None = None

    async def model_info(self) -> ModelInfo:
        try:
            spec = self.engine.model_config(self._model, self._version)
        except InferdError as exc:
            raise PerfRequestError(exc.message) from exc
        mbs = spec.max_batch_size
        self._info = ModelInfo(
            name=spec.name,
            version=self._version,
            inputs=tuple(TensorInfo(t.name, t.datatype.name, tuple(t.dims)) for t in spec.inputs),
            outputs=tuple(TensorInfo(t.name, t.datatype.name, tuple(t.dims)) for t in spec.outputs),
            max_batch_size=mbs,
            decoupled=spec.decoupled,
            sequence=spec.has_sequence_batching,
        )
        self.decoupled = spec.decoupled
        return self._info

    async def prepare(
        self, requests: Sequence[RequestData], batch_size: int, outputs: Sequence[str] | None
    ) -> None:
        info = self._info or await self.model_info()
        wanted = [RequestedOutput(name) for name in outputs] if outputs is not None else None
        known = {t.name for t in info.outputs}
        for name in outputs or ():
            if name not in known:
                raise InvalidArgumentError(f"model '{info.name}' has no output '{name}'")
        self.requests = [
            InferRequest(
                model_name=info.name,
                inputs=batch_tensors(data, batch_size, info.max_batch_size),
                model_version=self._version,
                outputs=list(wanted) if wanted is not None else None,
            )
            for data in requests
        ]

    async def open_channel(self) -> InProcessChannel:
        if not self.requests:
            raise InvalidArgumentError("prepare the requests before opening a channel")
        return InProcessChannel(self)

    async def statistics(self) -> dict[str, Any] | None:
        try:
            snapshots = self.engine.model_statistics(self._model, self._version)
        except InferdError:
            return None
        return select_statistics(to_json(snapshots)["model_stats"], self._model, self._version)

    async def close(self) -> None:
        self.requests = []
