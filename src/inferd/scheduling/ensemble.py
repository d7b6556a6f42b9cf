"""The ensemble scheduler: runs an ensemble's steps for each request, in process.

Each step is a request to another model, made through an injected :class:`ModelCaller`, so it
goes through that model's own scheduler and batches with the model's other traffic. Tensors pass
from step to step as the same arrays (no copy). A chain of steps runs in line in the request's
own task; a graph whose steps may overlap runs each step in a task that starts as soon as the
steps it reads from have finished.

Statistics follow Triton's rules for an ensemble: one success (or failure) per request with its
whole duration, the compute times summed over the steps' executions (reported by each step
request through ``InferRequest.on_timings``), and one execution per successful request; the
composing models count their own executions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.core.calls import ModelCaller
from inferd.core.clock import Clock, SystemClock
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import InferdError, InternalError, RequestCancelledError
from inferd.scheduling.ensemble_graph import EnsembleGraph, describe_step
from inferd.scheduling.ensemble_shapes import Reshape, ReshapePlan, reshape
from inferd.scheduling.stats import ModelStats

__all__ = ["EnsembleScheduler", "step_error"]

Tensors = dict[str, np.ndarray[Any, Any]]


class _ComputeTimes:
    """The compute times of one ensemble request's steps, added up as each step succeeds."""

    __slots__ = ("infer_ns", "input_ns", "output_ns")

    def __init__(self) -> None:
        self.input_ns = 0
        self.infer_ns = 0
        self.output_ns = 0

    def add(self, queue_ns: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        self.input_ns += input_ns
        self.infer_ns += infer_ns
        self.output_ns += output_ns


def step_error(ensemble: str, index: int, graph: EnsembleGraph, exc: InferdError) -> InferdError:
    """``exc`` raised by a step, as the ensemble reports it: the same class (so a client error
    stays a client error), the message naming the ensemble and the step."""
    message = f"in ensemble '{ensemble}', {describe_step(index, graph.steps[index])} failed: {exc}"
    try:
        return type(exc)(message)
    except TypeError:  # a subclass with another constructor: keep the code, lose the class
        wrapped = InferdError(message)
        wrapped.code = exc.code
        return wrapped


Check = tuple[str, "np.dtype[Any]", tuple[int, ...]]


class _StepPlan:
    """What a step's request must look like for the step model's own check to be skipped: the
    step model's spec as checked at load, and per input its dtype and dims (batch excluded)."""

    __slots__ = ("checks", "spec")

    def __init__(self, spec: ModelSpec, checks: tuple[Check, ...]) -> None:
        self.spec = spec
        self.checks = checks


def _plan(graph: EnsembleGraph, index: int, spec: ModelSpec) -> _StepPlan | None:
    """A plan when step ``index``'s inputs (of a batching ensemble) can be checked by dtype and
    exact shape alone: the step model batches, its inputs are fixed-size, not ragged, and the
    step feeds every input the model requires. Otherwise None: the step model checks each
    request itself."""
    if spec.max_batch_size <= 0:
        return None
    fed = set(graph.steps[index].input_map)
    checks: list[Check] = []
    for tensor in spec.inputs:
        if tensor.name not in fed:
            if not tensor.optional:
                return None
            continue
        if tensor.allow_ragged_batch or any(d < 0 for d in tensor.dims):
            return None
        checks.append((tensor.name, tensor.datatype.dtype, tuple(tensor.dims)))
    if len(checks) != len(fed):  # the step names an input the model does not have
        return None
    return _StepPlan(spec, tuple(checks))


class EnsembleScheduler:
    """Runs one ensemble version's requests; implements the scheduler protocol."""

    def __init__(
        self,
        graph: EnsembleGraph,
        call: ModelCaller,
        stats: ModelStats,
        clock: Clock | None = None,
        step_specs: Sequence[ModelSpec] | None = None,
        *,
        batching: bool = False,
        reshapes: ReshapePlan | None = None,
    ) -> None:
        self._graph = graph
        self._call = call
        self._clock = clock or SystemClock()
        self.stats = stats
        self._chain = graph.is_chain
        self._versions = tuple(step.model_version for step in graph.steps)
        # per step: (ensemble tensor, step input) pairs and (step output, ensemble tensor) pairs
        self._inputs = tuple(tuple(step.input_map.items()) for step in graph.steps)
        self._outputs = tuple(tuple(step.output_map.items()) for step in graph.steps)
        self._plans = (
            tuple(_plan(graph, i, s) for i, s in enumerate(step_specs))
            if step_specs is not None and batching
            else (None,) * len(graph.steps)
        )
        # where a tensor crosses between a batching and a non-batching side (ensemble_shapes)
        self._reshape_in: tuple[tuple[Reshape, ...], ...] = (
            reshapes.steps if reshapes is not None else ((),) * len(graph.steps)
        )
        self._reshape_out = {r.name: r for r in reshapes.outputs} if reshapes is not None else {}
        self._in_flight = 0
        self._drained: asyncio.Future[None] | None = None
        stats.pending_source = lambda: 0  # an ensemble queues nothing of its own

    @property
    def graph(self) -> EnsembleGraph:
        return self._graph

    async def submit(self, request: InferRequest, rows: int = 1) -> Tensors:
        clock = self._clock
        start_ns = clock.monotonic_ns()
        times = _ComputeTimes()
        tensors: Tensors = dict(request.inputs)
        self._in_flight += 1
        try:
            if self._chain:
                for index in self._graph.order:
                    await self._step(index, request, rows, tensors, times)
            else:
                await self._run_graph(request, rows, tensors, times)
            outputs = {name: tensors[name] for name in self._graph.outputs}
            for name, how in self._reshape_out.items():
                outputs[name] = reshape(outputs[name], how)
        except asyncio.CancelledError:
            self.stats.record_failure(clock.monotonic_ns() - start_ns, "CANCELED")
            raise
        except BaseException as exc:
            reason = "CANCELED" if isinstance(exc, RequestCancelledError) else "OTHER"
            self.stats.record_failure(clock.monotonic_ns() - start_ns, reason)
            raise
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._drained is not None:
                if not self._drained.done():
                    self._drained.set_result(None)
                self._drained = None
        self.stats.record_success(
            clock.monotonic_ns() - start_ns, 0, times.input_ns, times.infer_ns, times.output_ns
        )
        self.stats.record_execution(rows, times.input_ns, times.infer_ns, times.output_ns)
        return outputs

    async def _step(
        self,
        index: int,
        request: InferRequest,
        rows: int,
        tensors: Tensors,
        times: _ComputeTimes,
    ) -> None:
        step = self._graph.steps[index]
        version = self._versions[index]
        inputs = {name: tensors[tensor] for name, tensor in self._inputs[index]}
        for how in self._reshape_in[index]:
            inputs[how.name] = reshape(inputs[how.name], how)
        checked: ModelSpec | None = None
        plan = self._plans[index]
        if plan is not None:
            checked = plan.spec
            first = (rows,)
            for name, dtype, dims in plan.checks:
                given = inputs[name]
                shape = given.shape
                if given.dtype != dtype or shape[1:] != dims or shape[:1] != first:
                    checked = None  # the step model's own check names the problem
                    break
        trace = request.trace
        step_trace = None
        if trace is not None:
            step_trace = trace.step(index, step.model_name, self._clock.monotonic_ns())
        step_request = InferRequest(
            model_name=step.model_name,
            inputs=inputs,
            model_version="" if version is None else str(version),
            id=request.id,
            parameters=request.parameters,
            on_timings=times.add,
            trace=step_trace,
        )
        try:
            produced = await self._call.outputs(step_request, version, checked, rows)
        except InferdError as exc:
            if step_trace is not None:
                step_trace.end(self._clock.monotonic_ns(), str(exc))
            raise step_error(self._graph.name, index, self._graph, exc) from exc
        if step_trace is not None:
            step_trace.end(self._clock.monotonic_ns())
        for name, tensor in self._outputs[index]:
            array = produced.get(name)
            if array is None:
                raise InternalError(
                    f"in ensemble '{self._graph.name}', {describe_step(index, step)} did not "
                    f"produce its output '{name}' (ensemble tensor '{tensor}')"
                )
            tensors[tensor] = array

    async def _run_graph(
        self, request: InferRequest, rows: int, tensors: Tensors, times: _ComputeTimes
    ) -> None:
        """Each step in its own task, started once the steps it reads from are done."""
        graph = self._graph
        tasks: list[asyncio.Task[None]] = [None] * len(graph.steps)  # type: ignore[list-item]

        async def run(index: int, after: list[asyncio.Task[None]]) -> None:
            for dependency in after:
                await dependency  # a failed dependency fails this step with the same error
            await self._step(index, request, rows, tensors, times)

        for index in graph.order:
            after = [tasks[d] for d in graph.depends_on[index]]
            tasks[index] = asyncio.ensure_future(run(index, after))
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for index in graph.order:  # the first failure in order is the one the others saw
            result = results[index]
            if isinstance(result, BaseException):
                raise result

    async def drain(self) -> None:
        """Wait until no request is in flight."""
        if self._in_flight == 0:
            return
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drained)

    def shutdown(self) -> None:
        """Nothing waits outside the requests' own tasks."""
