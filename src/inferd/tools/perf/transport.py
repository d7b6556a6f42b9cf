"""What the load generator needs from a way of reaching a model, and the types it passes around.

A :class:`Transport` knows one model on one server (over HTTP, gRPC or in process). The driver
asks it for the model's :class:`ModelInfo`, hands it the input data once (:meth:`Transport.prepare`
builds every request's bytes ahead of time), then opens one :class:`Channel` per concurrent
context and calls :meth:`Channel.infer` with the index of a prepared request. Everything costly
happens in ``prepare``; ``infer`` only sends and waits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from inferd.errors import PerfAccessError as PerfAccessError
from inferd.errors import PerfRequestError as PerfRequestError
from inferd.tools.perf.llm_metrics import LlmSample

TRANSPORT_NAMES = ("http-json", "http-binary", "grpc", "grpc-stream", "in-process", "openai")


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a model as its metadata states it (-1 for a variable dim).

    ``shape`` leaves out the batch dimension when the model batches (``max_batch_size > 0``).
    """

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ModelInfo:
    """What the load generator needs to know of the model it loads."""

    name: str
    version: str  # "" when the server picks the version
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    max_batch_size: int  # 0: the model has no batch dimension
    decoupled: bool  # answers through a stream (zero or more responses, then a final flag)
    sequence: bool  # the config has a sequence_batching section

    def input(self, name: str) -> TensorInfo:
        """The input called ``name``; KeyError if the model has none of that name."""
        for tensor in self.inputs:
            if tensor.name == name:
                return tensor
        raise KeyError(name)


@dataclass(frozen=True)
class RequestData:
    """One request's input tensors, one sample each.

    The arrays hold one sample without the batch dimension; the transport repeats them to the
    batch size it is given in :meth:`Transport.prepare` when the model batches. BYTES tensors are
    numpy object arrays of ``bytes``.
    """

    tensors: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class SequenceFlags:
    """The sequence a request belongs to and whether it starts or ends it."""

    sequence_id: int
    start: bool
    end: bool


class Channel(Protocol):
    """One in-flight request at a time (perf_analyzer's "context"): one connection or stream."""

    async def infer(self, index: int, sequence: SequenceFlags | None = None) -> LlmSample | None:
        """Send prepared request ``index``; return when the (final) response has arrived, with
        the request's LLM figures for the ``openai`` transport (None for the others).

        Raise :class:`PerfRequestError` with the server's message on an error answer (the driver
        counts it); connection failures raise :class:`PerfRequestError` too.
        """
        ...

    async def close(self) -> None:
        """Close the connection or stream; further ``infer`` calls are not allowed."""
        ...


class Transport(Protocol):
    """A way of reaching one model: ``http-json``, ``http-binary``, ``grpc``, ``grpc-stream`` or
    ``in-process``."""

    name: str

    async def model_info(self) -> ModelInfo:
        """The model's inputs, outputs, batching, decoupled and sequence properties."""
        ...

    async def prepare(
        self, requests: Sequence[RequestData], batch_size: int, outputs: Sequence[str] | None
    ) -> None:
        """Build every request once (bytes on the wire), stacked to ``batch_size``.

        ``outputs`` names the outputs to ask for (None: all of them, as the server chooses).
        Channels opened afterwards send these requests by index.
        """
        ...

    async def open_channel(self) -> Channel:
        """A new channel (its own connection or stream) for one concurrent context."""
        ...

    async def statistics(self) -> dict[str, Any] | None:
        """The model's entry of the v2 statistics answer, in Triton's JSON shape.

        ``{"name", "version", "inference_count", "execution_count", "inference_stats":
        {"success"|"fail"|"queue"|"compute_input"|"compute_infer"|"compute_output":
        {"count", "ns"}}}`` with integer counts; None when the server offers no statistics.
        """
        ...

    async def close(self) -> None:
        """Close every channel and connection the transport opened."""
        ...
