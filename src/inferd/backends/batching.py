"""Helpers for runtimes that execute several requests as one batch along the first dimension."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from inferd.backends.base import ExecutionTimes, Result
from inferd.core.inference import InferRequest
from inferd.errors import InferdError, InvalidInputError

Array = np.ndarray[Any, Any]


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


def split_outputs(outputs: dict[str, Array], rows: Sequence[int]) -> list[dict[str, Array]]:
    """Cut batched outputs back into one dict per request (views, no copies)."""
    bounds = np.cumsum(rows)[:-1]
    per_request: list[dict[str, Array]] = [{} for _ in rows]
    for name, array in outputs.items():
        for target, part in zip(per_request, np.split(array, bounds, axis=0), strict=True):
            target[name] = part
    return per_request


def union_outputs(requests: Sequence[InferRequest], all_names: Sequence[str]) -> list[str]:
    """The outputs any request of the batch asked for, in model order."""
    wanted: set[str] = set()
    for request in requests:
        if request.outputs is None:
            return list(all_names)
        wanted.update(o.name for o in request.outputs)
    return [n for n in all_names if n in wanted]


def requested_names(request: InferRequest, all_names: Sequence[str]) -> list[str]:
    """The outputs one request asked for (all of them when it named none), in model order."""
    if request.outputs is None:
        return list(all_names)
    wanted = {o.name for o in request.outputs}
    return [n for n in all_names if n in wanted]


def execute_requests(
    requests: Sequence[InferRequest],
    times: ExecutionTimes,
    *,
    stackable: bool,
    output_names: Sequence[str],
    prepare: Callable[[dict[str, Array]], dict[str, Array]],
    run: Callable[[dict[str, Array], list[str]], dict[str, Array]],
) -> list[Result]:
    """The batching half of ``execute_timed`` shared by tensor runtimes.

    Requests that stack (same inputs, same non-batch dims) run as one call of ``run``; if that
    call fails on its inputs, each request runs alone so that only the bad one gets the error.
    ``prepare`` turns request tensors into the runtime's feeds; both may raise ``InferdError``.
    """
    if len(requests) > 1 and stackable and can_concatenate(requests):
        t0 = time.perf_counter_ns()
        try:
            stacked, rows = concatenate_inputs(requests)
            feeds = prepare(stacked)
            wanted = union_outputs(requests, output_names)
            t1 = time.perf_counter_ns()
            outputs = run(feeds, wanted)
            t2 = time.perf_counter_ns()
            parts = split_outputs(outputs, rows)
        except InvalidInputError:
            pass  # find the culprit by running each request alone
        except InferdError as exc:
            return [exc for _ in requests]
        else:
            times.input_ns += t1 - t0
            times.infer_ns += t2 - t1
            times.output_ns += time.perf_counter_ns() - t2
            return list(parts)
    results: list[Result] = []
    for request in requests:
        t0 = time.perf_counter_ns()
        try:
            feeds = prepare(request.inputs)
            t1 = time.perf_counter_ns()
            results.append(run(feeds, requested_names(request, output_names)))
        except InferdError as exc:
            results.append(exc)
            continue
        t2 = time.perf_counter_ns()
        times.input_ns += t1 - t0
        times.infer_ns += t2 - t1
    return results


class StackingInstance:
    """Base of instances that run stackable requests as one call (ONNX Runtime, OpenVINO).

    Subclasses set ``_batched`` (the model has a batch dimension) and ``_outputs`` (output names
    in model order), and implement ``_feeds`` (request tensors -> runtime feeds) and ``run``.
    """

    _batched: bool
    _outputs: dict[str, Any]

    def _feeds(self, inputs: dict[str, Array]) -> dict[str, Array]:
        raise NotImplementedError

    def run(self, feeds: dict[str, Array], output_names: list[str]) -> dict[str, Array]:
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
            stackable=self._batched,
            output_names=list(self._outputs),
            prepare=self._feeds,
            run=self.run,
        )
