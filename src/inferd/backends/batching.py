"""Stacking requests along the first dimension, and the ``execute`` of tensor runtimes.

What a failed batch answers (split on a request's content, fail on a fault) is decided in one
place, :mod:`inferd.backends.execution`; this module only stacks and cuts tensors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from inferd.backends.base import ExecutionTimes, Result
from inferd.backends.execution import run_batch
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.core.shaping import requested_names, union_outputs
from inferd.errors import InferdError, InternalError

Array = np.ndarray[Any, Any]
F = TypeVar("F")  # a runtime's feeds for one run


def can_concatenate(requests: Sequence[InferRequest]) -> bool:
    """True when every request has the same inputs with equal non-batch dims and dtypes."""
    first = requests[0].inputs
    for request in requests[1:]:
        inputs = request.inputs
        if inputs.keys() != first.keys():
            return False
        for name, array in inputs.items():
            ref = first[name]
            if array.shape[1:] != ref.shape[1:] or array.dtype != ref.dtype:
                return False
    return True


def concatenate_inputs(requests: Sequence[InferRequest]) -> tuple[dict[str, Array], list[int]]:
    """One feed per input (the requests stacked on axis 0) and each request's row count."""
    names = list(requests[0].inputs)
    rows = [next(iter(r.inputs.values())).shape[0] if r.inputs else 1 for r in requests]
    feeds = {name: np.concatenate([r.inputs[name] for r in requests], axis=0) for name in names}
    return feeds, rows


def check_rows(outputs: dict[str, Array], rows: int, model: str) -> None:
    """Every output of a batch of ``rows`` rows must have ``rows`` rows: one that lost the batch
    dimension cannot be cut back per request, and the model is at fault."""
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != rows:
            raise InternalError(
                f"model '{model}' returned output '{name}' with shape {list(array.shape)} for a "
                f"batch of {rows} rows; batched outputs must keep the batch dimension"
            )


def split_outputs(
    outputs: dict[str, Array], rows: Sequence[int], model: str
) -> list[dict[str, Array]]:
    """Cut batched outputs back into one dict per request (views, no copies)."""
    check_rows(outputs, sum(rows), model)
    per_request: list[dict[str, Array]] = [{} for _ in rows]
    for name, array in outputs.items():
        start = 0
        for target, count in zip(per_request, rows, strict=True):
            target[name] = array[start : start + count]
            start += count
    return per_request


def as_error(exc: BaseException) -> InferdError:
    """A caught failure as a request's result (runtimes raise only inferd's errors)."""
    if isinstance(exc, InferdError):
        return exc
    return InternalError(f"{type(exc).__name__}: {exc}")


def execute_requests(
    requests: Sequence[InferRequest],
    times: ExecutionTimes,
    *,
    model: str,
    stackable: bool,
    output_names: Sequence[str],
    prepare: Callable[[dict[str, Array]], F],
    run: Callable[[F, list[str]], dict[str, Array]],
) -> list[Result]:
    """The ``execute_timed`` of tensor runtimes: :func:`run_batch` over stacked requests.

    Requests that stack (same inputs, same non-batch dims) are concatenated, turned into the
    runtime's feeds by ``prepare`` and run by one call of ``run``; otherwise each runs alone.
    Both may raise ``InferdError``; what follows a failure is :mod:`inferd.backends.execution`'s.
    """

    def one(request: InferRequest) -> dict[str, Array]:
        t0 = time.perf_counter_ns()
        feeds = prepare(request.inputs)
        t1 = time.perf_counter_ns()
        times.input_ns += t1 - t0
        outputs = run(feeds, requested_names(request, output_names))
        times.infer_ns += time.perf_counter_ns() - t1
        return outputs

    def stacked(batch: Sequence[InferRequest]) -> list[dict[str, Array]]:
        t0 = time.perf_counter_ns()
        inputs, rows = concatenate_inputs(batch)
        feeds = prepare(inputs)
        t1 = time.perf_counter_ns()
        times.input_ns += t1 - t0
        outputs = run(feeds, union_outputs(batch, output_names))
        t2 = time.perf_counter_ns()
        times.infer_ns += t2 - t1
        parts = split_outputs(outputs, rows, model)
        times.output_ns += time.perf_counter_ns() - t2
        return parts

    stacks = stackable and len(requests) > 1 and can_concatenate(requests)
    return run_batch(
        requests,
        stacked=stacked if stacks else None,
        alone=one,
        answer=as_error,
        ids=lambda: [request.id for request in requests],
        model=model,
    )


class StackingInstance(Generic[F]):
    """Base of instances that run stackable requests as one call (ONNX Runtime, OpenVINO,
    PyTorch).

    Subclasses set ``_spec``, ``_batched`` (the model has a batch dimension) and
    ``_output_names`` (in model order), and implement ``_feeds`` (request tensors -> the
    runtime's feeds) and ``run``.
    """

    # in-process runtimes with no thread-bound state: a short batch may run on the event loop
    inline_safe = True

    _spec: ModelSpec
    _batched: bool
    _output_names: list[str]

    def _feeds(self, inputs: dict[str, Array]) -> F:
        raise NotImplementedError

    def run(self, feeds: F, output_names: list[str]) -> dict[str, Array]:
        raise NotImplementedError

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        return self.execute_timed(requests, ExecutionTimes())

    def execute_timed(
        self, requests: Sequence[InferRequest], times: ExecutionTimes
    ) -> list[Result]:
        """Run the requests as one batch when they stack; each alone otherwise."""
        return execute_requests(
            requests,
            times,
            model=self._spec.name,
            stackable=self._batched,
            output_names=self._output_names,
            prepare=self._feeds,
            run=self.run,
        )
