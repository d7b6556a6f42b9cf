"""The contracts every runtime implements, with a small explicit lifecycle.

``Backend.load(ctx) -> LoadedModel``;
``LoadedModel.create_instance(group, index) -> ModelInstance``;
``ModelInstance.execute(requests) -> one result per request`` where a result is either the output
tensors or an :class:`~inferd.errors.InferdError`, so one bad request never fails its batch-mates.
``execute`` is called from the instance's own worker thread and may block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.core.streaming import StreamedResponse
from inferd.errors import InferdError

__all__ = [
    "Backend",
    "ExecutionTimes",
    "LoadContext",
    "LoadedModel",
    "ModelInstance",
    "Outputs",
    "Result",
    "ThreadCalls",
    "TimedInstance",
]

Outputs = dict[str, np.ndarray[Any, Any]]
Result = Outputs | InferdError


class ThreadCalls(Protocol):
    """Calls to other models of the same server, from a backend's own threads (models that
    call models). ``deliver`` gets every response (the last one ``final``) on the server's
    event loop thread; the returned function cancels the call (from any thread)."""

    def start(
        self,
        request: InferRequest,
        deliver: Callable[[StreamedResponse], None],
        *,
        timeout_s: float | None = None,
    ) -> Callable[[], None]: ...


@dataclass(frozen=True, slots=True)
class LoadContext:
    spec: ModelSpec
    version: int
    model_dir: Path  # <repo>/<model>
    version_dir: Path  # <repo>/<model>/<version>
    calls: ThreadCalls | None = None  # None: models cannot call other models
    # the server holds its models within a memory budget: a runtime gives back, after each
    # request, memory it would otherwise keep for the next (a model's size stays what it was
    # measured to be at its load)
    bounded_memory: bool = False

    @property
    def model_path(self) -> Path:
        """``<version>/<default_model_filename>``; a directory is allowed (ONNX ``model.onnx/``)."""
        path = self.version_dir / self.spec.default_model_filename
        if path.is_dir() and (path / self.spec.default_model_filename).exists():
            return path / self.spec.default_model_filename
        return path


class ModelInstance(Protocol):
    """One instance of a loaded model.

    An instance class may set ``inline_safe = True`` when it may run on any thread (an
    in-process runtime with no thread-bound state): the instance pool then runs batches it has
    measured to be very short on the event loop thread, saving the hand-off to the instance
    thread. Calls are never concurrent either way.
    """

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class ExecutionTimes:
    """Where an execution spent its time, for the statistics extension (nanoseconds)."""

    input_ns: int = 0  # preparing inputs: concatenation, conversion, copies into the runtime
    infer_ns: int = 0  # the runtime's own computation
    output_ns: int = 0  # splitting and converting outputs


@runtime_checkable
class TimedInstance(ModelInstance, Protocol):
    """An instance that reports the phases of each execution (optional).

    The instance pool calls ``execute_timed`` on instances that are a ``TimedInstance``;
    instances without it have their whole ``execute`` counted as compute time.
    """

    def execute_timed(
        self, requests: Sequence[InferRequest], times: ExecutionTimes
    ) -> list[Result]: ...


class LoadedModel(Protocol):
    def create_instance(self, group: InstanceGroupSpec, index: int) -> ModelInstance: ...

    def close(self) -> None: ...


class Backend(Protocol):
    """A runtime: ``name`` is the config ``backend``, ``platforms`` the accepted ``platform``s."""

    name: str
    platforms: tuple[str, ...]
    default_model_filename: str

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        """Fill a partial ``ModelConfig`` message in place from the model file (may be a no-op)."""
        ...

    def load(self, ctx: LoadContext) -> LoadedModel: ...
