"""Instance pools: one worker thread per model instance, and inline runs for tiny models.

Native runtimes release the GIL while they compute, so each instance runs on its own thread and
several instances compute in parallel. The pool knows which instances are idle (on the event
loop thread) and hands a batch straight to one of them: each instance thread waits on its own
inbox, so a batch wakes exactly the thread that runs it. A batch put while every instance is
busy waits in a backlog, which the instance threads themselves take from as they finish.
Results come back to the event loop with a single ``call_soon_threadsafe`` per batch, where
statistics are counted and waiters resolved.

A thread hand-off costs two wake-ups (loop → instance thread → loop), tens of microseconds on
a virtual machine — more than a small model's whole computation. So an instance that may run on
any thread (``inline_safe``) runs a batch directly on the event loop thread when the pool's
measured cost of such a batch is below ``inline_bound_ns``: the loop is then blocked for at most
about that long, and the batch costs no wake-up at all. The first executions always run on the
instance threads, to measure; the estimate keeps following every execution, inline or not, so
a model that becomes slower moves back to its threads by itself.

A pool is OPEN, CLOSING or CLOSED (:mod:`inferd.scheduling.lifecycle`). Once :meth:`close` has
begun, a batch put is failed at once with :class:`~inferd.errors.UnavailableError`; the batches
accepted before are still run (each thread finishes its inbox and takes what waits in the
backlog before it stops), so every waiter gets exactly one answer or one error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from inferd.backends.base import ExecutionTimes, ModelInstance, Result, TimedInstance
from inferd.backends.execution import each_request
from inferd.core.clock import Clock, SystemClock
from inferd.core.inference import InferRequest
from inferd.errors import InferdError, InternalError, RequestCancelledError
from inferd.scheduling.lifecycle import RunState, check_transition, unloading_error
from inferd.scheduling.stats import ModelStats

_log = logging.getLogger("inferd.scheduling")

Waiter = asyncio.Future[Any]

# executions measured on the instance threads before a batch may run inline
INLINE_WARM_UP = 8
#: Batches measured one by one before the cost estimate counts as settled; after that, one
#: batch in SAMPLE_EVERY updates it.
SETTLED_SAMPLES = 64
SAMPLE_EVERY = 8
# weight of the newest execution in the cost estimate (an exponential moving average)
_EWMA_WEIGHT = 0.125
_OPEN = RunState.OPEN  # a module constant: read on every put


# a batch's per-request results, the phases' times, when it started, whether anything ran
_Outcome = tuple[list[Result | BaseException], ExecutionTimes, int, bool]


@dataclass(slots=True)
class WorkItem:
    requests: list[InferRequest]
    waiters: list[Waiter]
    arrivals_ns: list[int]  # when each request reached its scheduler (monotonic)
    rows: int  # total batch rows
    # rows that only pad the batch (a sequence batcher's idle slots): they run with the others,
    # count in the batch's size, and have no caller, no result and no request statistics
    padding: frozenset[int] = frozenset()


@dataclass(slots=True, eq=False)
class _Slot:
    """One instance, its thread's inbox, and the lock held while it executes or closes."""

    instance: ModelInstance
    timed: Any  # the bound ``execute_timed``, or None
    inline_safe: bool
    inbox: queue.SimpleQueue[WorkItem | None] = field(default_factory=queue.SimpleQueue)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False


class _CostEstimate:
    """The measured cost of a batch, scaled by its rows (updated from any thread; a lost update
    under a race only delays the estimate by one sample)."""

    __slots__ = ("calls", "ns", "rows")

    def __init__(self) -> None:
        self.calls = 0
        self.ns = 0.0
        self.rows = 1.0

    def add(self, ns: int, rows: int) -> None:
        if self.calls == 0:
            self.ns, self.rows = float(ns), float(max(rows, 1))
        else:
            self.ns += _EWMA_WEIGHT * (ns - self.ns)
            self.rows += _EWMA_WEIGHT * (max(rows, 1) - self.rows)
        self.calls += 1

    def predict(self, rows: int) -> float:
        return self.ns * max(1.0, rows / self.rows)


class InstancePool:
    """Owns the instance threads of one model version.

    ``free`` counts idle instances (maintained on the event loop thread); ``on_free`` is called
    on the loop each time an instance finishes a batch. ``inline_bound_ns`` (0: never) is the
    longest a batch may be expected to take to run on the event loop thread.
    """

    def __init__(
        self,
        name: str,
        instances: Sequence[ModelInstance],
        stats: ModelStats,
        loop: asyncio.AbstractEventLoop,
        clock: Clock | None = None,
        *,
        inline_bound_ns: int = 0,
        cpu_clock: Callable[[], int] = time.thread_time_ns,
    ) -> None:
        if not instances:
            raise InternalError(f"model '{name}' has no instances")
        self._name = name
        self._slots = [
            _Slot(
                inst,
                inst.execute_timed if isinstance(inst, TimedInstance) else None,
                bool(getattr(inst, "inline_safe", False)),
            )
            for inst in instances
        ]
        self._stats = stats
        self._loop = loop
        self._clock = clock or SystemClock()
        self._idle: list[_Slot] = list(reversed(self._slots))  # a stack: the warmest first
        self._inline_bound_ns = max(0, inline_bound_ns)
        self._cost = _CostEstimate()
        self._batches = 0  # batches executed (from any thread; a lost update is harmless)
        self._cpu_clock = cpu_clock
        self._backlog: deque[WorkItem] = deque()  # put while no instance was idle
        self._handing_out = False
        self.on_free: Callable[[], None] | None = None
        # threads still running, and what to run once the last one has closed its instance;
        # the lock also orders the state against every hand-out to an instance's inbox
        self._alive = len(self._slots)
        self._exit_lock = threading.Lock()
        self._state = RunState.OPEN
        self._after_close: Callable[[], None] | None = None
        self._threads = [
            threading.Thread(target=self._run, args=(slot,), name=f"inferd-{name}-{i}", daemon=True)
            for i, slot in enumerate(self._slots)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def size(self) -> int:
        return len(self._slots)

    @property
    def free(self) -> int:
        return len(self._idle)

    @property
    def state(self) -> RunState:
        return self._state

    def _move(self, new: RunState) -> None:  # under the exit lock
        check_transition(self._state, new)
        self._state = new

    def put(self, item: WorkItem) -> None:
        """Hand a batch to an idle instance, or queue it until one is idle (call on the event
        loop thread). Batches run in the order they were put.

        A batch cheap enough runs here and now, inline; its waiters are resolved before this
        returns. Once the pool is closing, the batch's waiters fail at once (unavailable)."""
        with self._exit_lock:  # one acquisition on the common path
            if self._state is not _OPEN:
                slot, refused = None, True
            elif self._backlog or not self._idle or self._handing_out:
                self._backlog.append(item)
                slot, refused = None, False
            else:  # an idle instance and nothing ahead of this batch
                slot, refused = self._idle.pop(), False
                if not self._inline(slot, item.rows):
                    slot.inbox.put(item)  # before close() puts the thread's stop mark
                    return
        if refused:
            self._refuse(item)
        elif slot is None:
            self._hand_out()
        else:
            self._handing_out = True
            try:
                self._run_inline(slot, item)
            finally:
                self._handing_out = False
            if self._backlog:
                self._hand_out()

    def _inline(self, slot: _Slot, rows: int) -> bool:
        return bool(slot.inline_safe and self._inline_bound_ns and self._runs_inline(rows))

    def _hand_out(self) -> None:
        if self._handing_out:  # an inline batch completing inside the loop below
            return
        self._handing_out = True
        try:
            while self._backlog and self._idle:
                with self._exit_lock:
                    if self._state is not _OPEN:
                        return  # closing: the threads take the backlog before they stop
                    item = self._next_backlogged()  # an instance thread may have taken the last
                    if item is None:
                        return
                    slot = self._idle.pop()
                    inline = self._inline(slot, item.rows)
                    if not inline:
                        slot.inbox.put(item)  # before close() puts the thread's stop mark
                if inline:
                    self._run_inline(slot, item)
        finally:
            self._handing_out = False

    def _refuse(self, item: WorkItem) -> None:
        """Fail every request of a batch that came after close (on the event loop thread)."""
        stats = self._stats
        now = self._clock.monotonic_ns()
        for i, (waiter, arrival) in enumerate(zip(item.waiters, item.arrivals_ns, strict=True)):
            if waiter.done() or i in item.padding:
                continue
            stats.record_failure(now - arrival, "REJECTED")
            waiter.set_exception(unloading_error(stats.name, stats.version))

    def _refuse_all(self, items: list[WorkItem]) -> None:
        for item in items:
            self._refuse(item)

    def _next_backlogged(self) -> WorkItem | None:
        """The oldest batch waiting for an instance (from any thread: deque pops are atomic)."""
        try:
            return self._backlog.popleft()
        except IndexError:
            return None

    def _runs_inline(self, rows: int) -> bool:
        cost = self._cost
        return cost.calls >= INLINE_WARM_UP and cost.predict(rows) <= self._inline_bound_ns

    def _run_inline(self, slot: _Slot, item: WorkItem) -> None:
        with slot.lock:
            if slot.closed:  # the pool is closing: the batch is not run
                stats = self._stats
                gone = [unloading_error(stats.name, stats.version) for _ in item.requests]
                outcome: _Outcome = (list(gone), ExecutionTimes(), 0, False)
            else:
                outcome = self._execute_item(slot, item)
        self._complete(slot, item, *outcome)

    # -- worker threads ------------------------------------------------------------------------

    def _run(self, slot: _Slot) -> None:
        """Run batches until told to stop, then the batches still waiting for an instance; the
        thread closes its own instance when it ends, so an instance is never closed while it is
        executing."""
        stopping = False
        try:
            item: WorkItem | None = slot.inbox.get()
            while True:
                if item is None:  # close(): nothing more comes to this inbox
                    stopping = True
                    item = self._next_backlogged()
                    if item is None:
                        break
                with slot.lock:
                    outcome = self._execute_item(slot, item)
                # work that waits for an instance is taken here and now: going through the loop
                # would leave this instance idle until the loop gets round to it
                following = self._next_backlogged()
                try:
                    self._loop.call_soon_threadsafe(
                        self._complete, slot, item, *outcome, following is not None
                    )
                except RuntimeError:  # the loop is closed: nobody is waiting any more
                    return
                # the batch's locals die here: outputs may pin runtime or shared memory
                del item, outcome
                if following is not None:
                    item = following
                elif stopping:
                    break
                else:
                    item = slot.inbox.get()
        finally:
            with slot.lock:
                slot.closed = True
                try:
                    slot.instance.close()
                except Exception:
                    _log.exception("closing an instance of model '%s' failed", self._name)
            left: list[WorkItem] = []
            with self._exit_lock:
                self._alive -= 1
                after = self._after_close if self._alive == 0 else None
                if after is not None:
                    self._after_close = None
                if self._alive == 0 and self._state is RunState.CLOSING:
                    self._move(RunState.CLOSED)
                    left = list(self._backlog)  # none, unless a thread stopped early
                    self._backlog.clear()
            if left:
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                    self._loop.call_soon_threadsafe(self._refuse_all, left)
            if after is not None:
                after()

    def _execute_item(self, slot: _Slot, item: WorkItem) -> _Outcome:
        """Execute one batch (under the slot's lock): per-request results, the phases' times,
        when it started, and whether anything ran."""
        start_ns = self._clock.monotonic_ns()
        # the estimate counts the thread's CPU time, not the wall clock: on an instance thread
        # the wall clock also counts waiting for the GIL while the loop holds it, which would
        # make a 10 µs model look slow exactly when the loop is busiest. Reading a thread's CPU
        # clock is a system call, so once the estimate has settled one batch in SAMPLE_EVERY
        # is measured.
        cost = self._cost
        self._batches += 1
        measured = cost.calls < SETTLED_SAMPLES or self._batches % SAMPLE_EVERY == 0
        cpu_ns = self._cpu_clock() if measured else 0
        waiters = item.waiters
        live = [i for i, w in enumerate(waiters) if not w.done()]
        times = ExecutionTimes()
        results: list[Result | BaseException]
        if not live:
            results = [RequestCancelledError("the request was cancelled") for _ in waiters]
            return results, times, start_ns, False
        if len(live) == len(item.requests):
            results = self._execute(slot, item.requests, times)
        else:
            produced = self._execute(slot, [item.requests[i] for i in live], times)
            results = [RequestCancelledError("the request was cancelled") for _ in waiters]
            for i, result in zip(live, produced, strict=True):
                results[i] = result
        if slot.timed is None:
            times.infer_ns = self._clock.monotonic_ns() - start_ns
        if measured:
            cost.add(self._cpu_clock() - cpu_ns, item.rows)
        return results, times, start_ns, True

    def _execute(
        self, slot: _Slot, requests: list[InferRequest], times: ExecutionTimes
    ) -> list[Result | BaseException]:
        try:
            if slot.timed is not None:
                out: list[Result] = slot.timed(requests, times)
            else:
                out = slot.instance.execute(requests)
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
        slot: _Slot,
        item: WorkItem,
        results: list[Result | BaseException],
        times: ExecutionTimes,
        start_ns: int,
        executed: bool,
        still_busy: bool = False,  # the instance's thread went on with a backlogged batch
    ) -> None:
        stats = self._stats
        now = self._clock.monotonic_ns()
        requests, waiters, arrivals = item.requests, item.waiters, item.arrivals_ns
        padding = item.padding
        if executed:
            stats.record_execution(
                item.rows,
                times.input_ns,
                times.infer_ns,
                times.output_ns,
                item.rows - len(padding),
            )
        if padding:
            kept = [i for i in range(len(requests)) if i not in padding]
            requests = [requests[i] for i in kept]
            waiters = [waiters[i] for i in kept]
            arrivals = [arrivals[i] for i in kept]
            results = [results[i] for i in kept]
        for request, waiter, result, arrival in zip(
            requests, waiters, results, arrivals, strict=True
        ):
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
                queue_ns = start_ns - arrival
                stats.record_success(
                    total, queue_ns, times.input_ns, times.infer_ns, times.output_ns
                )
                if request.trace is not None:
                    request.trace.executed(
                        stats.version,
                        arrival,
                        start_ns,
                        times.input_ns,
                        times.infer_ns,
                        times.output_ns,
                        item.rows,
                    )
                if request.on_timings is not None:
                    request.on_timings(queue_ns, times.input_ns, times.infer_ns, times.output_ns)
                waiter.set_result(result)
        if still_busy:
            return
        self._idle.append(slot)
        self._hand_out()
        if self.on_free is not None:
            self.on_free()

    def close(self, timeout_s: float = 5.0, then: Callable[[], None] | None = None) -> None:
        """Stop the threads after the queued work; each closes its instance as it ends, and
        ``then`` runs once every instance is closed (e.g. to release the model they share).

        Blocks up to ``timeout_s`` per thread. A thread still executing a batch after that is
        left to finish it and close its instance on its own (then the last one runs ``then``):
        closing an instance, or its model, under a running batch would crash the runtime.
        """
        self.on_free = None  # a closing pool calls nobody back (nor keeps its owner alive)
        with self._exit_lock:
            run_now = then is not None and self._alive == 0
            self._after_close = None if run_now else then
            first = self._state is RunState.OPEN
            if first:  # from now on put() refuses: no batch can land behind a stop mark
                self._move(RunState.CLOSING)
                if self._alive == 0:
                    self._move(RunState.CLOSED)
        if then is not None and run_now:
            then()
        if first:
            for slot in self._slots:
                slot.inbox.put(None)
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
