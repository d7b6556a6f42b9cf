"""Protocol-neutral inference request and response.

Tensors are numpy arrays. BYTES tensors are object arrays of ``bytes``. Codecs build these from
the wire without copying where the wire allows (``np.frombuffer``); backends read them directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.core.streaming import ResponseSink
from inferd.core.tracing import RequestTrace

__all__ = ["InferRequest", "InferResponse", "OutputBuffer", "ParamValue", "RequestedOutput"]

ParamValue = bool | int | float | str


@dataclass(frozen=True, slots=True)
class OutputBuffer:
    """Where a requested output goes instead of being sent back: ``byte_size`` bytes of the
    shared-memory region ``region``. ``write`` puts bytes at the start of that window (it raises
    an :class:`~inferd.errors.InferdError` when the region can no longer take them)."""

    region: str
    byte_size: int
    write: Callable[[memoryview], None]


@dataclass(slots=True)
class RequestedOutput:
    """One entry of a request's ``outputs`` list."""

    name: str
    binary: bool | None = None  # None: fall back to the request-level default
    classification: int = 0  # top-N classification extension, 0 = off
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    shared_memory: OutputBuffer | None = None  # shared-memory extension: write it there


@dataclass(slots=True)
class InferRequest:
    model_name: str
    inputs: dict[str, np.ndarray[Any, Any]]
    model_version: str = ""  # "" = the latest ready version
    id: str = ""
    outputs: list[RequestedOutput] | None = None  # None = every model output
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    binary_output_default: bool = False  # HTTP `binary_data_output`
    # called on the event loop when the request succeeds, with its queue and compute times in
    # ns (queue, input, infer, output): how a caller that runs it for another request (an
    # ensemble step) adds those times to its own statistics
    on_timings: Callable[[int, int, int, int], None] | None = None
    # where a decoupled model sends its responses (set by the engine's streaming entry)
    sink: ResponseSink | None = None
    # the caller's W3C trace context (``traceparent``, ``tracestate``), read from the HTTP
    # headers or gRPC metadata by the front ends while the server traces
    trace_context: dict[str, str] | None = None
    # what the request goes through, while it is traced (see core/tracing.py)
    trace: RequestTrace | None = None


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    outputs: dict[str, np.ndarray[Any, Any]]  # in the order they are to be sent
    id: str = ""
    parameters: dict[str, ParamValue] = field(default_factory=dict)
