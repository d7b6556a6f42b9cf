"""The sequence batcher's driver: admit, ask the slot policy, fill controls and state, dispatch.

Every decision comes from :class:`inferd.scheduling.sequence_policy.SequenceSlots`; this class
owns the requests' payloads and waiters, the implicit state (:mod:`inferd.scheduling.state`),
one timer and the per-instance pools. It runs entirely on the event loop: a request's arrival,
an instance becoming free, a finished request and the timer each ask for one planning pass,
and the passes asked for in one loop iteration are merged, so arrivals that come together
batch together.

A request that reaches its slot keeps running even if its caller gave up: the sequence's state
must still advance for the requests after it.

The batcher is OPEN until :meth:`SequenceBatcher.shutdown`, then CLOSING while requests it
dispatched are still in its pools, then CLOSED (:mod:`inferd.scheduling.lifecycle`). Shutting
down fails the requests still waiting for their turn and forgets every sequence; a request
submitted once it is closing fails at once with :class:`~inferd.errors.UnavailableError`, and
one already running gets its answer (or its pool's error).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.core.clock import Clock, SystemClock, TimerHandle
from inferd.core.inference import InferRequest, RequestedOutput
from inferd.core.model_spec import ModelSpec
from inferd.errors import InferdError, InvalidArgumentError, OverloadedError
from inferd.scheduling.instances import WorkItem
from inferd.scheduling.lifecycle import RunState, Stateful, unloading_error
from inferd.scheduling.pinned import PinnedPools
from inferd.scheduling.sequence_policy import Batch, Item, Refusal, SequenceSlots, SlotPolicy
from inferd.scheduling.state import ControlFiller, SequenceId, StateStore
from inferd.scheduling.stats import ModelStats

_log = logging.getLogger("inferd.scheduling")

_UINT64_MASK = (1 << 64) - 1


@dataclass(slots=True)
class _Pending:
    request: InferRequest
    waiter: asyncio.Future[Any]  # the caller's
    key: SequenceId


def _zeros_like(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if array.dtype.hasobject:
        empty = np.empty(array.shape, dtype=object)
        empty.fill(b"")
        return empty
    return np.zeros(array.shape, dtype=array.dtype)


def sequence_flags(request: InferRequest, model: str) -> tuple[SequenceId, bool, bool]:
    """The request's sequence id, START and END flags; refuse a request outside a sequence."""
    params = request.parameters
    raw = params.get("sequence_id", 0)
    key: SequenceId
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise InvalidArgumentError(
            "parameter 'sequence_id' must be an unsigned integer or a string"
        )
    key = raw & _UINT64_MASK if isinstance(raw, int) else raw  # gRPC sends int64
    if key == 0 or key == "":
        raise InvalidArgumentError(
            f"inference request to model '{model}' must specify a non-zero or non-empty "
            "correlation ID"
        )
    return key, bool(params.get("sequence_start", False)), bool(params.get("sequence_end", False))


class SequenceBatcher(Stateful):
    def __init__(
        self,
        spec: ModelSpec,
        pools: PinnedPools,
        stats: ModelStats,
        model_dir: Path,
        *,
        clock: Clock | None = None,
        max_backlog_sequences: int = 1024,
        max_queued_requests: int = 8192,
    ) -> None:
        seq = spec.sequence_batching
        assert seq is not None
        self._spec = spec
        self._seq = seq
        self._name = spec.name
        self._pools = pools
        self.stats = stats
        self._clock = clock or SystemClock()
        rows = max(1, spec.max_batch_size)
        per_instance = rows
        if seq.strategy == "oldest" and seq.max_candidate_sequences > 0:
            per_instance = seq.max_candidate_sequences
        self.slots = SequenceSlots(
            SlotPolicy(
                strategy=seq.strategy,
                instances=pools.size,
                slots_per_instance=per_instance,
                max_batch_size=rows,
                max_sequence_idle_ns=seq.max_sequence_idle_us * 1000,
                max_queue_delay_ns=seq.max_queue_delay_us * 1000,
                minimum_slot_utilization=seq.minimum_slot_utilization,
                preferred_batch_sizes=seq.preferred_batch_sizes,
                max_backlog_sequences=max_backlog_sequences,
                max_queued_requests=max_queued_requests,
            )
        )
        batched = spec.max_batch_size > 0
        self._controls = ControlFiller(seq, spec.name, batched)
        self.implicit_state = StateStore(seq, spec.name, model_dir, batched)
        self._state_outputs = self.implicit_state.output_names
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._timer: TimerHandle | None = None
        self._timer_at: int | None = None
        self._planned = False
        self._init_work()
        pools.on_free = self._ask
        stats.watch(self.pending_count, self.sequence_counts)

    def pending_count(self) -> int:
        """Requests queued for a sequence slot."""
        return self.slots.queued

    def sequence_counts(self) -> dict[str, int]:
        """Sequences now active (holding a slot) and backlogged, and totals since load."""
        slots = self.slots
        return {
            "active": slots.active,
            "backlogged": slots.backlogged,
            "started": slots.started,
            "ended": slots.ended,
            "released_idle": slots.released_idle,
        }

    # -- arrivals --------------------------------------------------------------------------

    async def submit(self, request: InferRequest, rows: int = 1) -> dict[str, np.ndarray[Any, Any]]:
        if self._state is not RunState.OPEN:
            self.stats.record_rejection("unloading")
            raise self._unloading()
        if rows != 1:
            raise InvalidArgumentError(
                f"inference request to model '{self._name}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        key, start, end = sequence_flags(request, self._name)
        self._controls.check_id(key)
        item = Item(next(self._ids), self._clock.monotonic_ns(), start, end)
        conflict = start and self.slots.is_open(key)
        refusal = self.slots.admit(key, item)
        if refusal is not None:
            self.stats.record_rejection(
                "queue_full" if refusal is Refusal.BACKLOG_FULL else "invalid_parameters"
            )
            raise self._refusal_error(refusal, key)
        if conflict:  # Triton's warning, word for word
            _log.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did not end "
                "before this sequence start. Previous sequence will be terminated early.",
                key,
                self._name,
            )
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[item.id] = _Pending(request, waiter, key)
        self._work_begins()
        self._ask()
        try:
            return await waiter  # type: ignore[no-any-return]
        finally:
            self._work_ends()

    def _unloading(self) -> InferdError:
        return unloading_error(self._name, self.stats.version)

    def _refusal_error(self, refusal: Refusal, key: SequenceId) -> InferdError:
        which = f"inference request for sequence {key} to model '{self._name}'"
        if refusal is Refusal.NOT_STARTED:
            return InvalidArgumentError(
                f"{which} must specify the START flag on the first request of the sequence"
            )
        if refusal is Refusal.ENDED:
            return InvalidArgumentError(
                f"{which} continues a sequence that has already ended; start a new sequence "
                "with the START flag"
            )
        if refusal is Refusal.RELEASED:
            return InvalidArgumentError(
                f"{which} continues a sequence that was released after being idle for more "
                f"than {self._seq.max_sequence_idle_us} microseconds "
                "(max_sequence_idle_microseconds); its state is gone, start it again with the "
                "START flag"
            )
        policy = self.slots.policy
        return OverloadedError(
            f"every sequence slot of model '{self._name}' is taken and its backlog is full "
            f"({policy.max_backlog_sequences} sequences or {policy.max_queued_requests} "
            "requests waiting); retry later"
        )

    # -- planning --------------------------------------------------------------------------

    def _ask(self) -> None:
        """Plan once at the end of this loop iteration, however often this is called."""
        if self._planned or self._state is not RunState.OPEN:
            return
        self._planned = True
        asyncio.get_running_loop().call_soon(self._plan)

    def _plan(self) -> None:
        self._planned = False
        if self._state is not RunState.OPEN:
            return
        try:
            now = self._clock.monotonic_ns()
            for released in self.slots.release_idle(now):
                self.implicit_state.drop(released.key)  # type: ignore[arg-type]
            plan = self.slots.plan(now, self._pools.free_instances())
            for batch in plan.batches:
                self._dispatch(batch)
            self._arm(plan.wake_at_ns, now)
        except Exception:  # one bad pass must never stop the batcher
            _log.exception("sequence batcher of model '%s' failed a step", self._name)

    def _arm(self, wake_at_ns: int | None, now: int) -> None:
        if wake_at_ns == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = wake_at_ns
        if wake_at_ns is not None:
            self._timer = self._clock.call_later_ns(wake_at_ns - now, self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, None
        self._ask()

    def _dispatch(self, batch: Batch) -> None:
        loop = asyncio.get_running_loop()
        requests: list[InferRequest] = []
        waiters: list[asyncio.Future[Any]] = []
        arrivals: list[int] = []
        for _key, _slot, item in batch.items:
            pending = self._pending.pop(item.id)
            requests.append(self._with_sequence_inputs(pending.request, pending.key, item))
            inner: asyncio.Future[Any] = loop.create_future()
            inner.add_done_callback(
                lambda done, p=pending, i=item: self._finished(p, i, done)  # type: ignore[misc]
            )
            waiters.append(inner)
            arrivals.append(item.arrival_ns)
        self.stats.close_reasons[self._seq.strategy] += 1
        padding: frozenset[int] = frozenset()
        if batch.padded:
            requests, waiters, arrivals, padding = self._pad(batch, requests, waiters, arrivals)
        self._pools.put(
            batch.instance, WorkItem(requests, waiters, arrivals, len(requests), padding)
        )

    def _pad(
        self,
        batch: Batch,
        requests: list[InferRequest],
        waiters: list[asyncio.Future[Any]],
        arrivals: list[int],
    ) -> tuple[list[InferRequest], list[asyncio.Future[Any]], list[int], frozenset[int]]:
        """The batch's rows in slot order with a padding row in each idle slot below the
        highest one (direct strategy): zeros shaped as the first request's inputs, the controls
        of :meth:`ControlFiller.idle`, zero state, and a waiter nobody awaits."""
        template = requests[0]
        inputs = {name: _zeros_like(array) for name, array in template.inputs.items()}
        inputs.update(self._controls.idle())
        idle = InferRequest(
            model_name=template.model_name,
            inputs=inputs,
            model_version=template.model_version,
            outputs=template.outputs,
        )
        loop = asyncio.get_running_loop()
        now = self._clock.monotonic_ns()
        rows = [(slot, i) for i, (_key, slot, _item) in enumerate(batch.items)]
        rows += [(slot, -1) for slot in batch.padded]
        rows.sort()
        out_requests: list[InferRequest] = []
        out_waiters: list[asyncio.Future[Any]] = []
        out_arrivals: list[int] = []
        padding: list[int] = []
        for row, (_slot, index) in enumerate(rows):
            if index < 0:
                padding.append(row)
                out_requests.append(idle)
                out_waiters.append(loop.create_future())
                out_arrivals.append(now)
            else:
                out_requests.append(requests[index])
                out_waiters.append(waiters[index])
                out_arrivals.append(arrivals[index])
        return out_requests, out_waiters, out_arrivals, frozenset(padding)

    def _with_sequence_inputs(
        self, request: InferRequest, key: SequenceId, item: Item
    ) -> InferRequest:
        inputs = dict(request.inputs)
        inputs.update(self._controls.fill(key, item.start, item.end))
        inputs.update(self.implicit_state.inputs_for(key, item.start))
        outputs = request.outputs
        if outputs is not None and self._state_outputs:
            asked = {o.name for o in outputs}
            outputs = outputs + [RequestedOutput(n) for n in self._state_outputs if n not in asked]
        return InferRequest(
            model_name=request.model_name,
            inputs=inputs,
            model_version=request.model_version,
            id=request.id,
            outputs=outputs,
            parameters=request.parameters,
            binary_output_default=request.binary_output_default,
        )

    def _finished(self, pending: _Pending, item: Item, done: asyncio.Future[Any]) -> None:
        """A request has run (on the loop): keep its state output, free its sequence's turn.
        Once the batcher is closing its sequences are forgotten: the request only gets its
        answer."""
        key = pending.key
        outcome: BaseException | dict[str, Any]
        open_ = self._state is RunState.OPEN
        if done.cancelled():
            outcome = self._unloading()
        elif (exc := done.exception()) is not None:
            outcome = exc
        else:
            outputs: dict[str, Any] = done.result()
            outcome = outputs
            if open_:
                try:
                    self.implicit_state.update(key, outputs)
                except InferdError as error:
                    _log.error("sequence %s of model '%s': %s", key, self._name, error)
                    outcome = error
        if open_:
            if item.end:
                self.implicit_state.drop(key)
            self.slots.complete(key, item, self._clock.monotonic_ns())
        waiter = pending.waiter
        if not waiter.done():
            if isinstance(outcome, BaseException):
                waiter.set_exception(outcome)
            else:
                waiter.set_result(outcome)
        self._ask()

    # -- shutdown --------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Refuse new work, fail what still waits for its turn, stop the timer (on the event
        loop thread); requests already dispatched finish in the pools, or fail there once they
        close. A second call changes nothing."""
        if not self._begin_closing():
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, None
        self.slots.drain()
        for pending in self._pending.values():
            if not pending.waiter.done():
                pending.waiter.set_exception(self._unloading())
        self._pending.clear()
        self._closed_if_idle()
