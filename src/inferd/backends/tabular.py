"""Execution shared by the tabular runtimes (tree ensembles, scikit-learn estimators).

A tabular model has one 2-D input (rows x features) and one output with one row per input row.
An instance checks every request of a batch on its own first, so a request with the wrong
feature count or data type gets its error while the others are stacked into one matrix and run
with a single library call; the result is cut back into one output per request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.backends.autofill import apply_batching
from inferd.backends.base import ExecutionTimes, Result
from inferd.backends.batching import as_error, split_outputs
from inferd.backends.execution import run_batch
from inferd.backends.runtime_errors import Blame, RuntimeFamily
from inferd.backends.threads import default_intra_op_threads
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec, TensorSpec
from inferd.errors import ConfigError, InferdError, InternalError, InvalidInputError

Array = np.ndarray[Any, Any]
#: rows (n, features) -> output (n, columns), already in the configured output data type
PredictFn = Callable[[Array], Array]


def blame(exc: BaseException) -> Blame:
    """The tabular libraries raise ``ValueError`` / ``TypeError`` on data they cannot take."""
    return Blame.REQUEST if isinstance(exc, ValueError | TypeError) else Blame.MODEL


def instance_threads(spec: ModelSpec, configured: int | None, cores: int | None = None) -> int:
    """The configured thread count, else the cores shared evenly among the model's instances."""
    if configured is not None and configured > 0:
        return configured
    return default_intra_op_threads(spec, cores)


# -- the I/O shape of a tabular model -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TabularIO:
    """One input of shape (rows, features) and one output of shape (rows, columns)."""

    input: TensorSpec
    output: TensorSpec
    batched: bool

    @classmethod
    def from_spec(cls, spec: ModelSpec, backend: str) -> TabularIO:
        if len(spec.inputs) != 1 or len(spec.outputs) != 1:
            raise ConfigError(
                f"backend '{backend}' serves models with exactly one input (the feature matrix) "
                f"and one output; model '{spec.name}' declares {len(spec.inputs)} input(s) and "
                f"{len(spec.outputs)} output(s)"
            )
        batched = spec.max_batch_size > 0
        rank = 1 if batched else 2
        for kind, tensor in (("input", spec.inputs[0]), ("output", spec.outputs[0])):
            dims = tensor.reshape if tensor.reshape is not None else tensor.dims
            if len(dims) != rank:
                shape = "[ features ]" if kind == "input" else "[ columns ]"
                if not batched:
                    shape = "[ -1, features ]" if kind == "input" else "[ -1, columns ]"
                raise ConfigError(
                    f"{kind} '{tensor.name}' of model '{spec.name}' must have dims {shape} "
                    f"(max_batch_size {spec.max_batch_size}), got {list(tensor.dims)}"
                )
        return cls(spec.inputs[0], spec.outputs[0], batched)

    @property
    def features(self) -> int:
        """The configured feature count, -1 when variable."""
        return self.input.dims[-1]

    @property
    def columns(self) -> int:
        return self.output.dims[-1]


def is_complete(config: Any) -> bool:
    """A ``ModelConfig`` that lists its input and output, each with dims."""
    tensors = (*config.input, *config.output)
    return len(config.input) > 0 and len(config.output) > 0 and all(len(t.dims) for t in tensors)


def complete_io(
    config: Any,
    *,
    features: int,
    columns: int,
    output_type: str = "TYPE_FP32",
    default_max_batch_size: int,
) -> None:
    """Fill what a tabular ``ModelConfig`` leaves out: ``input__0`` (FP32 ``[features]``),
    ``output__0`` (``[columns]``) and, when it lists no input, batching."""
    from tritonclient.grpc import model_config_pb2 as mc

    if len(config.input) == 0:
        apply_batching(
            config, can_batch=True, default_max_batch_size=default_max_batch_size, where=""
        )
    lead = [] if config.max_batch_size > 0 else [-1]
    for tensors, name, data_type, width in (
        (config.input, "input__0", "TYPE_FP32", features),
        (config.output, "output__0", output_type, columns),
    ):
        tensor = tensors[0] if len(tensors) else tensors.add()
        if not tensor.name:
            tensor.name = name
        if tensor.data_type == mc.TYPE_INVALID:
            tensor.data_type = mc.DataType.Value(data_type)
        if len(tensor.dims) == 0:
            tensor.dims.extend([*lead, width])


def cast_output(array: Array, tensor: TensorSpec) -> Array:
    """Convert a predicted matrix to the output's configured data type."""
    if tensor.datatype.is_bytes:
        flat = [str(v).encode("utf-8") if not isinstance(v, bytes) else v for v in array.ravel()]
        return np.array(flat, dtype=object).reshape(array.shape)
    return np.ascontiguousarray(array, dtype=tensor.datatype.dtype)


# -- the instance -------------------------------------------------------------------------------


class TabularInstance:
    """Runs a tabular model's ``predict`` over a batch of requests (one call per batch)."""

    inline_safe = True  # in-process libraries: a short batch may run on the event loop

    def __init__(
        self,
        model_name: str,
        io: TabularIO,
        predict: PredictFn,
        *,
        num_features: int,  # -1: not known, any width is passed to the model
        runtime: str,  # the library that predicts, as named in error messages
        close: Callable[[], None] | None = None,
    ) -> None:
        self._model = model_name
        self._family = RuntimeFamily(runtime, blame, summary=str)
        self._io = io
        self._predict: PredictFn | None = predict
        self._features = num_features
        self._dtype = io.input.datatype.dtype
        self._on_close = close

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        return self.execute_timed(requests, ExecutionTimes())

    def execute_timed(
        self, requests: Sequence[InferRequest], times: ExecutionTimes
    ) -> list[Result]:
        """Check each request alone, then run those that pass as one matrix."""
        t0 = time.perf_counter_ns()
        results: list[Result | None] = [None] * len(requests)
        good: list[int] = []
        matrices: list[Array] = []
        counts: list[int] = []
        for index, request in enumerate(requests):
            try:
                matrix = self._rows(request)
            except InferdError as exc:
                results[index] = exc
            else:
                good.append(index)
                matrices.append(matrix)
                counts.append(matrix.shape[0])
        output = self._io.output.name

        def alone(rows: Array) -> dict[str, Array]:
            t1 = time.perf_counter_ns()
            predicted = self._run(rows)
            times.infer_ns += time.perf_counter_ns() - t1
            return {output: predicted}

        def stacked(batch: Sequence[Array]) -> list[dict[str, Array]]:
            rows = np.concatenate(batch, axis=0)
            t1 = time.perf_counter_ns()
            predicted = self._run(rows)
            t2 = time.perf_counter_ns()
            parts = split_outputs({output: predicted}, counts, self._model)
            times.input_ns += t1 - t0
            times.infer_ns += t2 - t1
            times.output_ns += time.perf_counter_ns() - t2
            return parts

        answers = run_batch(
            matrices,
            stacked=stacked,
            alone=alone,
            answer=as_error,
            ids=lambda: [requests[i].id for i in good],
            model=self._model,
        )
        if len(good) == len(requests):
            return answers
        for index, answer in zip(good, answers, strict=True):
            results[index] = answer
        return [r for r in results if r is not None]

    def _rows(self, request: InferRequest) -> Array:
        name = self._io.input.name
        array = request.inputs.get(name)
        if array is None or len(request.inputs) != 1:
            got = ", ".join(sorted(request.inputs)) or "none"
            raise InvalidInputError(
                f"model '{self._model}' expects exactly one input '{name}', got: {got}"
            )
        if array.ndim != 2 or (self._features >= 0 and array.shape[1] != self._features):
            width = f"{self._features} features" if self._features >= 0 else "the features"
            raise InvalidInputError(
                f"input '{name}' of model '{self._model}' must be a matrix of one row per "
                f"sample with {width} per row, got shape {list(array.shape)}"
            )
        if array.dtype != self._dtype:
            raise InvalidInputError(
                f"input '{name}' of model '{self._model}' must be "
                f"{self._io.input.datatype.name}, got {array.dtype}"
            )
        return array

    def _run(self, rows: Array) -> Array:
        predict = self._predict
        if predict is None:
            raise InternalError(f"an instance of model '{self._model}' was used after close")
        try:
            return predict(rows)
        except Exception as exc:  # the library's failure, translated once, here
            raise self._family.translate(exc, self._model) from exc

    def close(self) -> None:
        self._predict = None
        if self._on_close is not None:
            self._on_close()
            self._on_close = None
