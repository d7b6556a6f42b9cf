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
from typing import Any

import numpy as np

from inferd.core.calls import ModelCaller
from inferd.core.clock import Clock, SystemClock
from inferd.core.inference import InferRequest
from inferd.errors import InferdError, InternalError, RequestCancelledError
from inferd.scheduling.ensemble_graph import EnsembleGraph, describe_step
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


class EnsembleScheduler:
    """Runs one ensemble version's requests; implements the scheduler protocol."""

    def __init__(
        self,
        graph: EnsembleGraph,
        call: ModelCaller,
        stats: ModelStats,
        clock: Clock | None = None,
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
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
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
        self._idle.clear()
        try:
            if self._chain:
                for index in self._graph.order:
                    await self._step(index, request, tensors, times)
            else:
                await self._run_graph(request, tensors, times)
            outputs = {name: tensors[name] for name in self._graph.outputs}
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
                self._idle.set()
        self.stats.record_success(
            clock.monotonic_ns() - start_ns, 0, times.input_ns, times.infer_ns, times.output_ns
        )
        self.stats.record_execution(rows, times.input_ns, times.infer_ns, times.output_ns)
        return outputs

    async def _step(
        self, index: int, request: InferRequest, tensors: Tensors, times: _ComputeTimes
    ) -> None:
        step = self._graph.steps[index]
        version = self._versions[index]
        step_request = InferRequest(
            model_name=step.model_name,
            inputs={name: tensors[tensor] for name, tensor in self._inputs[index]},
            model_version="" if version is None else str(version),
            id=request.id,
            parameters=request.parameters,
            on_timings=times.add,
        )
        try:
            produced = await self._call.outputs(step_request, version)
        except InferdError as exc:
            raise step_error(self._graph.name, index, self._graph, exc) from exc
        for name, tensor in self._outputs[index]:
            array = produced.get(name)
            if array is None:
                raise InternalError(
                    f"in ensemble '{self._graph.name}', {describe_step(index, step)} did not "
                    f"produce its output '{name}' (ensemble tensor '{tensor}')"
                )
            tensors[tensor] = array

    async def _run_graph(
        self, request: InferRequest, tensors: Tensors, times: _ComputeTimes
    ) -> None:
        """Each step in its own task, started once the steps it reads from are done."""
        graph = self._graph
        tasks: list[asyncio.Task[None]] = [None] * len(graph.steps)  # type: ignore[list-item]

        async def run(index: int, after: list[asyncio.Task[None]]) -> None:
            for dependency in after:
                await dependency  # a failed dependency fails this step with the same error
            await self._step(index, request, tensors, times)

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
        await self._idle.wait()

    def shutdown(self) -> None:
        """Nothing waits outside the requests' own tasks."""
