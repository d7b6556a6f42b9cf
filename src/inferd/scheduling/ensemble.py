"""The ensemble scheduler: runs an ensemble's steps for each request, in process.

Each step is a request to another model, made through an injected :class:`ModelCaller`, so it
goes through that model's own scheduler and batches with the model's other traffic. Tensors pass
from step to step as the same arrays (no copy). A chain of steps runs in line in the request's
own task; a graph whose steps may overlap runs each step in a task that starts as soon as the
steps it reads from have finished. An ensemble with decoupled steps (``ensemble_decoupled``)
runs the steps computed from a decoupled step's outputs once per response of that step and
sends each of its own responses through the request's sink as soon as its outputs are ready.

Statistics follow Triton's rules for an ensemble: one success (or failure) per request with its
whole duration, the compute times summed over the steps' executions (reported by each step
request through ``InferRequest.on_timings``), and one execution per successful request; the
composing models count their own executions.

The scheduler is OPEN until :meth:`EnsembleScheduler.shutdown`, then CLOSING while requests it
accepted are still running their steps, then CLOSED (:mod:`inferd.scheduling.lifecycle`); a
request submitted once it is closing fails at once with :class:`~inferd.errors.UnavailableError`
and runs no step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

import numpy as np

from inferd.core.calls import ModelCaller
from inferd.core.clock import Clock, SystemClock
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.core.streaming import ResponseSink, StreamedResponse
from inferd.errors import InferdError, InternalError, RequestCancelledError, UnsupportedError
from inferd.scheduling.ensemble_decoupled import Origins
from inferd.scheduling.ensemble_graph import EnsembleGraph, describe_step
from inferd.scheduling.ensemble_shapes import Reshape, ReshapePlan, reshape
from inferd.scheduling.lifecycle import RunState, Stateful, unloading_error
from inferd.scheduling.stats import ModelStats

__all__ = ["EnsembleScheduler", "step_error"]

Tensors = dict[str, np.ndarray[Any, Any]]
#: every response of the model a request names (the in-process caller's ``stream_outputs``)
StreamCall = Callable[[InferRequest], AsyncGenerator[StreamedResponse, None]]


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


class EnsembleScheduler(Stateful):
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
        origins: Origins | None = None,
        stream: StreamCall | None = None,
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
        self._origins = origins if origins is not None and origins.decoupled else None
        if self._origins is not None and stream is None:
            raise UnsupportedError(
                f"ensemble '{graph.name}' has decoupled steps but no way to stream their responses"
            )
        self._stream = stream
        self._in_flight = 0
        self._drained: asyncio.Future[None] | None = None

    @property
    def graph(self) -> EnsembleGraph:
        return self._graph

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def submit(self, request: InferRequest, rows: int = 1) -> Tensors:
        if self._state is not RunState.OPEN:
            self.stats.record_rejection("unloading")
            raise unloading_error(self.stats.name, self.stats.version)
        clock = self._clock
        start_ns = clock.monotonic_ns()
        times = _ComputeTimes()
        tensors: Tensors = dict(request.inputs)
        self._in_flight += 1
        try:
            if self._origins is not None:
                sink = request.sink
                if sink is None:
                    raise UnsupportedError(
                        f"ensemble '{self._graph.name}' is decoupled (it has decoupled steps): "
                        "send its requests on a stream"
                    )
                await self._iterate(self._origins, 0, request, rows, tensors, times, sink)
                outputs: Tensors = {}  # every response went through the sink
            elif self._chain:
                for index in self._graph.order:
                    await self._step(index, request, rows, tensors, times)
                outputs = self._answer(tensors)
            else:
                await self._run_graph(request, rows, tensors, times)
                outputs = self._answer(tensors)
        except asyncio.CancelledError:
            self.stats.record_failure(clock.monotonic_ns() - start_ns, "CANCELED")
            raise
        except BaseException as exc:
            reason = "CANCELED" if isinstance(exc, RequestCancelledError) else "OTHER"
            self.stats.record_failure(clock.monotonic_ns() - start_ns, reason)
            raise
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                if self._drained is not None:
                    if not self._drained.done():
                        self._drained.set_result(None)
                    self._drained = None
                self._closed_if_closing()
        self.stats.record_success(
            clock.monotonic_ns() - start_ns, 0, times.input_ns, times.infer_ns, times.output_ns
        )
        self.stats.record_execution(rows, times.input_ns, times.infer_ns, times.output_ns)
        return outputs

    def _answer(self, tensors: Tensors) -> Tensors:
        outputs = {name: tensors[name] for name in self._graph.outputs}
        for name, how in self._reshape_out.items():
            outputs[name] = reshape(outputs[name], how)
        return outputs

    def _step_inputs(self, index: int, tensors: Tensors) -> Tensors:
        inputs = {name: tensors[tensor] for name, tensor in self._inputs[index]}
        for how in self._reshape_in[index]:
            inputs[how.name] = reshape(inputs[how.name], how)
        return inputs

    def _store(self, index: int, produced: Tensors, tensors: Tensors) -> None:
        for name, tensor in self._outputs[index]:
            array = produced.get(name)
            if array is None:
                raise InternalError(
                    f"in ensemble '{self._graph.name}', "
                    f"{describe_step(index, self._graph.steps[index])} did not produce its "
                    f"output '{name}' (ensemble tensor '{tensor}')"
                )
            tensors[tensor] = array

    async def _iterate(
        self,
        origins: Origins,
        origin: int,
        request: InferRequest,
        rows: int,
        tensors: Tensors,
        times: _ComputeTimes,
        sink: ResponseSink,
    ) -> None:
        """One iteration of ``origin``: its steps, the ensemble's response if its outputs come
        from this origin, then each decoupled step that reads it, once per response."""
        for index in origins.steps[origin]:
            await self._step(index, request, rows, tensors, times)
        if origin == origins.output and not sink.send(
            StreamedResponse(self._answer(tensors), None, False)
        ):
            raise RequestCancelledError(f"ensemble '{self._graph.name}': the request was cancelled")
        for index in origins.children[origin]:
            step_request = InferRequest(
                model_name=self._graph.steps[index].model_name,
                inputs=self._step_inputs(index, tensors),
                model_version=str(self._versions[index] or ""),
                id=request.id,
                parameters=request.parameters,
                on_timings=times.add,
            )
            assert self._stream is not None  # checked at construction
            responses = self._stream(step_request)
            async with contextlib.aclosing(responses):
                while True:
                    try:
                        item = await anext(responses)
                    except StopAsyncIteration:
                        break
                    except InferdError as exc:  # the step model refused the request
                        raise step_error(self._graph.name, index, self._graph, exc) from exc
                    if item.error is not None:
                        raise step_error(self._graph.name, index, self._graph, item.error)
                    if item.outputs is None:
                        continue
                    fork = dict(tensors)
                    self._store(index, item.outputs, fork)
                    opened = origins.opens[index]
                    await self._iterate(origins, opened, request, rows, fork, times, sink)

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
        inputs = self._step_inputs(index, tensors)
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
        self._store(index, produced, tensors)

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
        """Refuse new requests from now on (on the event loop thread). Nothing waits outside
        the requests' own tasks: those in flight run their remaining steps, each of which its
        step model answers or fails."""
        if self._state is RunState.OPEN:
            self._move(RunState.CLOSING)
            if self._in_flight == 0:
                self._move(RunState.CLOSED)
