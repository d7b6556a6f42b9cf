"""The typed inferd API for new Python models.

Write a ``model.py`` with one subclass of :class:`Model`::

    import numpy as np
    from inferd.backends.python.api import Model, ModelContext

    class Scale(Model):
        def setup(self, context: ModelContext) -> None:
            self.factor = float(context.parameters.get("factor", "2"))

        def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {"OUTPUT0": inputs["INPUT0"] * self.factor}

``predict`` receives a whole batch: when the model batches (``max_batch_size > 0``) the server
stacks the requests of a batch along the first dimension (zero-copy: the worker sees one view of
shared memory) and cuts the outputs back per request. Batching is the server's job, never the
model's. To refuse a request for its content, raise :class:`inferd.errors.InvalidArgumentError`
(answered 400): if it was raised on a stacked batch, ``predict`` runs again on each request alone,
so only the bad one gets the error. Any other exception fails every request of the batch (500)
and ``predict`` is not called again for them. Each instance runs in its own worker process.

A decoupled model (``model_transaction_policy { decoupled: true }``) implements
:meth:`Model.stream` instead: a generator that yields any number of responses for one request,
and stops early when ``request.is_cancelled()``::

    class Countdown(Model):
        def stream(self, inputs, request):
            for i in range(int(inputs["N"][0]), 0, -1):
                yield {"OUT": np.array([i], dtype=np.int32)}

A model may call other models served by the same server while it runs (no network hop):
:func:`infer` returns the outputs of one response, :func:`infer_stream` iterates over every
response of a decoupled model. Both raise the called model's error as an
:class:`inferd.errors.InferdError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]

_RUNTIME: Any = None  # the worker serving this process (set by the worker)


def attach_runtime(worker: Any) -> None:
    """Called by the worker: :func:`infer` goes through its channel."""
    global _RUNTIME
    _RUNTIME = worker


@dataclass(frozen=True, slots=True)
class ModelContext:
    """What a model instance learns about itself at setup."""

    model_name: str
    model_version: int
    instance_name: str
    instance_kind: str  # "CPU", "GPU" or "MODEL"
    device_id: int
    model_dir: Path  # <repository>/<model>
    max_batch_size: int
    config: dict[str, Any] = field(default_factory=dict)  # the normalised config (JSON form)
    parameters: dict[str, str] = field(default_factory=dict)  # config `parameters`

    @property
    def version_dir(self) -> Path:
        return self.model_dir / str(self.model_version)


class Model:
    """Base class of typed Python models: override :meth:`predict`, optionally the others."""

    def setup(self, context: ModelContext) -> None:
        """Called once in the worker process before the first batch (load weights here)."""

    def predict(self, inputs: dict[str, Array]) -> dict[str, Array]:
        """Compute the outputs of a whole batch. Input arrays are read-only views."""
        raise NotImplementedError(f"{type(self).__name__} does not implement predict()")

    def stream(
        self, inputs: dict[str, Array], request: StreamRequest
    ) -> Iterator[dict[str, Array]]:
        """Decoupled models: yield the responses of one request (any number, even none)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement stream()")

    def teardown(self) -> None:
        """Called once when the model is unloaded."""


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """The request a decoupled model's :meth:`Model.stream` answers."""

    id: str
    parameters_json: str
    index: int
    streams: Any

    def is_cancelled(self) -> bool:
        """The client cancelled the request or went away: stop yielding."""
        return bool(self.streams.is_cancelled(self.index))


def _start(
    model: str, inputs: dict[str, Array], outputs: list[str] | None, version: str, timeout_s: float
) -> int:
    if _RUNTIME is None:
        raise RuntimeError("inferd.backends.python.api.infer works only inside a served model")
    return int(
        _RUNTIME.calls.start(
            model,
            {name: np.asarray(value) for name, value in inputs.items()},
            outputs=outputs,
            version=version,
            timeout_us=int(timeout_s * 1_000_000),
        )
    )


def infer_stream(
    model: str,
    inputs: dict[str, Array],
    *,
    outputs: list[str] | None = None,
    version: str = "",
    timeout_s: float = 0.0,
) -> Iterator[dict[str, Array]]:
    """Every response of ``model`` for ``inputs``, as it sends them."""
    call = _start(model, inputs, outputs, version, timeout_s)
    for produced, error in _RUNTIME.calls.iterate(call):
        if error is not None:
            raise error
        yield produced


def infer(
    model: str,
    inputs: dict[str, Array],
    *,
    outputs: list[str] | None = None,
    version: str = "",
    timeout_s: float = 0.0,
) -> dict[str, Array]:
    """The outputs of ``model`` for ``inputs`` (its first response)."""
    results = list(
        infer_stream(model, inputs, outputs=outputs, version=version, timeout_s=timeout_s)
    )
    return results[0] if results else {}


__all__ = ["Model", "ModelContext", "StreamRequest", "infer", "infer_stream"]
