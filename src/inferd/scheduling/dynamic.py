"""The dynamic batcher's driver: snapshot the queue, ask the policy, dispatch, wait.

All decisions come from :func:`inferd.scheduling.policy.decide`; this class only owns the
queue, one background task, and a timer. It wakes on three events: a request arrives, an
instance becomes free, or the policy's ``wake_at`` time comes.

The batcher is OPEN until :meth:`DynamicBatcher.shutdown`, then CLOSING while batches it
dispatched are still in its pool, then CLOSED (:mod:`inferd.scheduling.lifecycle`). Shutting
down fails the requests still queued; a request submitted once it is closing fails at once with
:class:`~inferd.errors.UnavailableError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import Any

import numpy as np

from inferd.core.clock import Clock, SystemClock, TimerHandle
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import DeadlineExceededError, InferdError, OverloadedError
from inferd.scheduling.instances import InstancePool, WorkItem
from inferd.scheduling.lifecycle import RunState, Stateful, unloading_error
from inferd.scheduling.policy import BatchPolicy, decide
from inferd.scheduling.queues import AdmissionQueues, Entry
from inferd.scheduling.stats import ModelStats

_log = logging.getLogger("inferd.scheduling")


def shape_key(request: InferRequest, ragged: frozenset[str]) -> Hashable:
    """Requests batch together only if every non-ragged input has the same non-batch dims."""
    return tuple(
        (name, None if name in ragged else array.shape[1:], array.dtype.str)
        for name, array in sorted(request.inputs.items())
    )


class DynamicBatcher(Stateful):
    def __init__(
        self,
        spec: ModelSpec,
        pool: InstancePool,
        stats: ModelStats,
        *,
        clock: Clock | None = None,
    ) -> None:
        assert spec.dynamic_batching is not None
        db = spec.dynamic_batching
        self._spec = spec
        self._pool = pool
        self.stats = stats
        self._clock = clock or SystemClock()
        self._policy = BatchPolicy(
            max_batch_size=spec.max_batch_size,
            preferred_batch_sizes=tuple(sorted(db.preferred_batch_sizes)),
            max_queue_delay_ns=db.max_queue_delay_us * 1000,
        )
        self._ragged = frozenset(t.name for t in spec.inputs if t.allow_ragged_batch)
        self._queues = AdmissionQueues(db)
        self._wake = asyncio.Event()
        self._timer: TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._init_work()
        self._preserve_ordering = db.preserve_ordering
        self._last_release: asyncio.Future[None] | None = None  # preserve_ordering chain
        pool.on_free = self._wake.set
        stats.watch(self.pending_count)

    def pending_count(self) -> int:
        """Requests queued, not yet in a batch."""
        return len(self._queues)

    def _ensure_running(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"inferd-batcher-{self._spec.name}"
            )

    async def submit(self, request: InferRequest, rows: int = 1) -> dict[str, np.ndarray[Any, Any]]:
        if self._state is not RunState.OPEN:
            self.stats.record_rejection("unloading")
            raise unloading_error(self._spec.name, self.stats.version)
        self._ensure_running()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        try:
            entry = self._queues.admit(
                request,
                waiter,
                rows=rows,
                shape_key=shape_key(request, self._ragged),
                now_ns=self._clock.monotonic_ns(),
            )
        except OverloadedError:
            self.stats.record_rejection("queue_full")
            raise
        except InferdError:
            self.stats.record_rejection("invalid_parameters")
            raise
        self._work_begins()
        self._wake.set()
        previous, release = self._last_release, None
        if self._preserve_ordering:
            release = self._last_release = loop.create_future()
        try:
            try:
                result = await waiter
            except asyncio.CancelledError:
                self._queues.remove([entry])  # never let an abandoned request enter a batch
                raise
            except InferdError:
                if previous is not None:
                    await asyncio.shield(previous)
                raise
            if previous is not None:
                await asyncio.shield(previous)  # answer in arrival order
            return result  # type: ignore[no-any-return]
        finally:
            if release is not None:
                _release_after(previous, release)
            self._work_ends()

    async def _run(self) -> None:
        while self._state is RunState.OPEN:
            try:
                self._step()
            except Exception:  # one bad step must never stop the batcher
                _log.exception("dynamic batcher of model '%s' failed a step", self._spec.name)
            await self._wake.wait()
            self._wake.clear()

    def _step(self) -> None:
        queues = self._queues
        while True:
            if not queues or (not self._pool.free and not queues.has_deadlines):
                return  # nothing to do until a request arrives or an instance is free
            now = self._clock.monotonic_ns()
            # with no timeouts to check, the policy needs only the requests that could join the
            # next batch (each has at least one row, or ends it): O(batch), not O(queue)
            entries = queues.ordered(
                now, None if queues.has_deadlines else self._policy.max_batch_size + 1
            )
            decision = decide([e.view for e in entries], now, self._policy, self._pool.free)
            expired = [entries[i] for i in decision.expired]
            for entry in expired:
                self.stats.record_rejection("queue_timeout")
                if not entry.waiter.done():
                    entry.waiter.set_exception(
                        DeadlineExceededError(
                            f"Request timeout expired: request to model '{self._spec.name}' "
                            "waited in the queue past its timeout"
                        )
                    )
            taken = [entries[i] for i in decision.take]
            self._queues.remove(expired + taken)
            if taken:
                self._dispatch(taken, decision.reason.value if decision.reason else "")
                continue  # another batch may be ready for another free instance
            self._arm_timer(decision.wake_at_ns, now)
            return

    def _dispatch(self, taken: list[Entry], reason: str) -> None:
        live = [e for e in taken if not e.waiter.done()]
        if not live:
            return
        self.stats.close_reasons[reason] += 1
        self._pool.put(
            WorkItem(
                requests=[e.request for e in live],
                waiters=[e.waiter for e in live],
                arrivals_ns=[e.view.arrival_ns for e in live],
                rows=sum(e.view.rows for e in live),
            )
        )

    def _arm_timer(self, wake_at_ns: int | None, now: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if wake_at_ns is not None:
            self._timer = self._clock.call_later_ns(wake_at_ns - now, self._wake.set)

    def shutdown(self) -> None:
        """Refuse new work, fail what still waits, stop the task (on the event loop thread);
        batches already dispatched finish in the pool, or fail there once it closes."""
        if not self._begin_closing():
            return
        for entry in self._queues.drain_all():
            if not entry.waiter.done():
                entry.waiter.set_exception(unloading_error(self._spec.name, self.stats.version))
        if self._timer is not None:
            self._timer.cancel()
        # woken, the loop sees the batcher closing and returns: a cancelled task would keep
        # its CancelledError, whose traceback holds the loop's frame and so this batcher, its
        # instances and their sessions in a reference cycle until the collector's next pass
        self._wake.set()
        self._closed_if_idle()


def _release_after(previous: asyncio.Future[None] | None, release: asyncio.Future[None]) -> None:
    """Open this request's gate once every earlier request's gate is open."""

    def open_gate(_: object = None) -> None:
        if not release.done():
            release.set_result(None)

    if previous is None or previous.done():
        open_gate()
    else:
        previous.add_done_callback(open_gate)
