"""Instance pools: one worker thread per model instance.

Native runtimes release the GIL while they compute, so each instance runs on its own thread and
several instances compute in parallel. Work reaches the threads through one shared queue, so a
batch goes to whichever instance is free first; results come back to the event loop with a single
``call_soon_threadsafe`` per batch, where statistics are counted and waiters resolved.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from inferd.backends.base import ExecutionTimes, ModelInstance, Result, TimedInstance
from inferd.backends.execution import each_request
from inferd.core.clock import Clock, SystemClock
from inferd.core.inference import InferRequest
from inferd.errors import InferdError, InternalError, RequestCancelledError
from inferd.scheduling.stats import ModelStats

_log = logging.getLogger("inferd.scheduling")

Waiter = asyncio.Future[Any]


@dataclass(slots=True)
class WorkItem:
    requests: list[InferRequest]
    waiters: list[Waiter]
    arrivals_ns: list[int]  # when each request reached its scheduler (monotonic)
    rows: int  # total batch rows


class InstancePool:
    """Owns the instance threads of one model version.

    ``free`` counts instances with no work assigned (maintained on the event loop thread);
    ``on_free`` is called on the loop each time an instance finishes a batch.
    """

    def __init__(
        self,
        name: str,
        instances: Sequence[ModelInstance],
        stats: ModelStats,
        loop: asyncio.AbstractEventLoop,
        clock: Clock | None = None,
    ) -> None:
        if not instances:
            raise InternalError(f"model '{name}' has no instances")
        self._name = name
        self._instances = list(instances)
        self._stats = stats
        self._loop = loop
        self._clock = clock or SystemClock()
        self._queue: queue.SimpleQueue[WorkItem | None] = queue.SimpleQueue()
        self._assigned = 0
        self.on_free: Callable[[], None] | None = None
        # threads still running, and what to run once the last one has closed its instance
        self._alive = len(self._instances)
        self._exit_lock = threading.Lock()
        self._after_close: Callable[[], None] | None = None
        self._threads = [
            threading.Thread(target=self._run, args=(inst,), name=f"inferd-{name}-{i}", daemon=True)
            for i, inst in enumerate(self._instances)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def size(self) -> int:
        return len(self._instances)

    @property
    def free(self) -> int:
        return len(self._instances) - self._assigned

    def put(self, item: WorkItem) -> None:
        """Hand a batch to the first free instance (call on the event loop thread)."""
        self._assigned += 1
        self._queue.put(item)

    # -- worker threads ------------------------------------------------------------------------

    def _run(self, instance: ModelInstance) -> None:
        """Run batches until told to stop; the thread closes its own instance when it ends, so
        an instance is never closed while it is executing."""
        timed = instance.execute_timed if isinstance(instance, TimedInstance) else None
        try:
            while True:
                item = self._queue.get()
                if item is None or not self._run_one(instance, timed, item):
                    return
                # the batch's locals died with _run_one: outputs may pin runtime or shared memory
                del item
        finally:
            try:
                instance.close()
            except Exception:
                _log.exception("closing an instance of model '%s' failed", self._name)
            with self._exit_lock:
                self._alive -= 1
                after = self._after_close if self._alive == 0 else None
                if after is not None:
                    self._after_close = None
            if after is not None:
                after()

    def _run_one(self, instance: ModelInstance, timed: Any, item: WorkItem) -> bool:
        """Execute one batch and hand the results to the loop; False once the loop is gone."""
        start_ns = self._clock.monotonic_ns()
        live = [i for i, w in enumerate(item.waiters) if not w.done()]
        times = ExecutionTimes()
        results: list[Result | BaseException] = [
            RequestCancelledError("the request was cancelled") for _ in item.requests
        ]
        if live:
            requests = (
                item.requests
                if len(live) == len(item.requests)
                else [item.requests[i] for i in live]
            )
            produced = self._execute(instance, timed, requests, times)
            for i, result in zip(live, produced, strict=True):
                results[i] = result
            if timed is None:
                times.infer_ns = self._clock.monotonic_ns() - start_ns
        try:
            self._loop.call_soon_threadsafe(
                self._complete, item, results, times, start_ns, bool(live)
            )
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            return False
        return True

    def _execute(
        self,
        instance: ModelInstance,
        timed: Any,
        requests: list[InferRequest],
        times: ExecutionTimes,
    ) -> list[Result | BaseException]:
        try:
            if timed is not None:
                out: list[Result] = timed(requests, times)
            else:
                out = instance.execute(requests)
            if len(out) != len(requests):
                raise InternalError(
                    f"model '{self._name}' returned {len(out)} results for {len(requests)} requests"
                )
            return list(out)
        except InferdError as exc:
            return list(each_request(exc, len(requests)))
        except Exception:
            _log.exception("model '%s' failed while executing a batch", self._name)
            return [InternalError(f"model '{self._name}' failed while executing") for _ in requests]

    # -- back on the event loop ----------------------------------------------------------------

    def _complete(
        self,
        item: WorkItem,
        results: list[Result | BaseException],
        times: ExecutionTimes,
        start_ns: int,
        executed: bool,
    ) -> None:
        self._assigned -= 1
        stats = self._stats
        now = self._clock.monotonic_ns()
        if executed:
            stats.record_execution(item.rows, times.input_ns, times.infer_ns, times.output_ns)
        for waiter, result, arrival in zip(item.waiters, results, item.arrivals_ns, strict=True):
            total = now - arrival
            if waiter.done():
                stats.record_failure(total, "CANCELED")
                continue
            if isinstance(result, BaseException):
                stats.record_failure(
                    total, "CANCELED" if isinstance(result, RequestCancelledError) else "BACKEND"
                )
                waiter.set_exception(result)
            else:
                stats.record_success(
                    total, start_ns - arrival, times.input_ns, times.infer_ns, times.output_ns
                )
                waiter.set_result(result)
        if self.on_free is not None:
            self.on_free()

    def close(self, timeout_s: float = 5.0, then: Callable[[], None] | None = None) -> None:
        """Stop the threads after the queued work; each closes its instance as it ends, and
        ``then`` runs once every instance is closed (e.g. to release the model they share).

        Blocks up to ``timeout_s`` per thread. A thread still executing a batch after that is
        left to finish it and close its instance on its own (then the last one runs ``then``):
        closing an instance, or its model, under a running batch would crash the runtime.
        """
        with self._exit_lock:
            run_now = then is not None and self._alive == 0
            self._after_close = None if run_now else then
        if then is not None and run_now:
            then()
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout_s)
        busy = [t.name for t in self._threads if t.is_alive()]
        if busy:
            _log.warning(
                "model '%s': %d instance(s) still executing after %.0f s; each is closed when "
                "its batch ends (%s)",
                self._name,
                len(busy),
                timeout_s,
                ", ".join(busy),
            )
