"""One instance of a Python model: the server-side handle of its worker process.

``execute`` copies the batch's inputs into the instance's arena, sends a small JSON message
with their offsets, blocks on the socket *and* the process's death until the worker answers,
and returns the outputs as views of the arena (``transfer.py``).

A worker that dies while executing fails only that batch, with an error that says so, and is
restarted at once (``initialize`` runs again in the new process); the model stays READY. A worker
found dead while idle is restarted before the next batch, which then runs normally.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from inferd.backends.base import ExecutionTimes, Result
from inferd.backends.execution import describe, each_request
from inferd.backends.python import shm
from inferd.backends.python.protocol import Message, encode, sequence_fields
from inferd.backends.python.server import transfer
from inferd.backends.python.server.exchange import Exchange, Wakeup
from inferd.backends.python.server.launcher import describe_exit
from inferd.backends.python.server.stream_pump import StreamPump
from inferd.backends.python.server.worker_handle import WorkerHandle, await_ready
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec
from inferd.core.validation import validate_request
from inferd.errors import InferdError, InternalError, OverloadedError, UnavailableError

if TYPE_CHECKING:
    from inferd.backends.python.server.backend import PythonModel

log = logging.getLogger(__name__)

#: How long ``finalize()`` may take at unload before the worker is killed.
FINALIZE_TIMEOUT_S = 30.0


class PythonInstance:
    """One instance: the server-side handle of a worker process."""

    def __init__(self, model: PythonModel, group: InstanceGroupSpec, index: int) -> None:
        self._model = model
        self._spec = model.spec
        self._group = group
        self._index = index
        self._label = f"'{self._spec.name}' instance {index}"
        self._lock = threading.Lock()
        self._closing = False
        self._worker: WorkerHandle | None = None
        self._wakeup = Wakeup()
        self._pump: StreamPump | None = None  # decoupled models: the worker's reader
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        worker_ = self._worker
        return None if worker_ is None else worker_.process.pid

    # -- starting ----------------------------------------------------------------------------

    def start(self, launched: WorkerHandle | None = None) -> None:
        """Adopt a pre-launched worker (or launch one) and wait until it has initialised."""
        self._worker = launched or self._model.launch(self._group, self._index)
        self._await_ready(self._worker, loading=True)

    def _await_ready(self, w: WorkerHandle, *, loading: bool) -> None:
        reason = await_ready(w, self._index)
        if reason is None:
            return
        self._worker = None
        if loading:  # the loader prefixes "failed to load '<model>' version <n>: "
            raise InternalError(reason)
        raise UnavailableError(
            f"the Python model worker for {self._label} could not be restarted: {reason}"
        )

    def _ready_worker(self) -> WorkerHandle:
        """The worker, (re)started and initialised if needed (blocking)."""
        w = self._worker
        if w is not None and w.ready and not w.alive():
            self.restarts += 1
            log.error(
                "the Python model worker for %s died while idle (%s); restarting it "
                "(restart %d of this instance)",
                self._label,
                describe_exit(w.reap()),
                self.restarts,
            )
            self._drop_pump()
            w.release()
            w = self._worker = None
        if w is None:
            w = self._worker = self._model.launch(self._group, self._index)
        if not w.ready:
            self._await_ready(w, loading=False)
        return w

    def _died(self, w: WorkerHandle, requests: Sequence[InferRequest]) -> InternalError:
        """Fail the in-flight batch; restart now unless the model is unloading."""
        exitcode = w.reap()
        self._drop_pump()
        w.release()
        self._worker = None
        what = describe_exit(exitcode)
        if self._closing:
            return InternalError(
                f"the Python model worker for {self._label} stopped ({what}) while the model "
                "was unloading"
            )
        self.restarts += 1
        log.error(
            "the Python model worker for %s died (%s) while running %s; restarting it "
            "(restart %d of this instance)",
            self._label,
            what,
            describe([r.id for r in requests]),
            self.restarts,
        )
        try:
            self._worker = self._model.launch(self._group, self._index)  # initialises meanwhile
        except Exception:
            log.exception("restarting the Python model worker for %s failed", self._label)
        return InternalError(
            f"the Python model worker for {self._label} died ({what}) while executing; "
            f"it is being restarted (restart {self.restarts} of this instance)"
        )

    # -- executing ---------------------------------------------------------------------------

    def execute(self, requests: Sequence[InferRequest]) -> list[Result]:
        return self.execute_timed(requests, ExecutionTimes())

    def execute_timed(
        self, requests: Sequence[InferRequest], times: ExecutionTimes
    ) -> list[Result]:
        results: list[Result | None] = [None] * len(requests)
        good: list[int] = []
        for i, request in enumerate(requests):
            try:
                validate_request(request, self._spec)
            except InferdError as exc:
                results[i] = exc
            else:
                good.append(i)
        if good:
            with self._lock:
                answers: list[Result]
                if self._closing:
                    unloading = UnavailableError(f"model {self._label} is unloading")
                    answers = list(each_request(unloading, len(good)))
                else:
                    try:
                        answers = self._round_trip([requests[i] for i in good], times)
                    except InferdError as exc:
                        answers = list(each_request(exc, len(good)))
            for i, answer in zip(good, answers, strict=True):
                results[i] = answer
        return [r for r in results if r is not None]

    def _round_trip(self, requests: Sequence[InferRequest], times: ExecutionTimes) -> list[Result]:
        t0 = time.perf_counter_ns()
        staged = transfer.stage_inputs(requests)
        needed = transfer.input_bytes(staged)
        batch: Any = None
        for attempt in (1, 2):
            w = self._ready_worker()
            message = self._write_inputs(w, staged, requests, needed)
            try:
                if self._spec.decoupled:
                    batch = self._submit(w, message, requests)
                w.send(message)
                break
            except OSError:  # died while idle, between the check and the send: nothing ran
                log.error("the Python model worker for %s was gone; restarting it", self._label)
                w.reap()
                if batch is not None and self._pump is not None:
                    self._pump.withdraw(batch)
                self._drop_pump()
                w.release()
                self._worker = None
                if attempt == 2:
                    raise UnavailableError(
                        f"the Python model worker for {self._label} cannot be reached"
                    ) from None
        t1 = time.perf_counter_ns()
        if self._spec.decoupled:
            return self._decoupled(w, batch, requests, times, (t0, t1))
        overloaded: list[OverloadedError] = []

        def grow(reply: Message) -> bool:
            try:
                self._grow(w, int(reply["needed"]), int(reply["minimum"]))
            except OverloadedError as exc:
                w.send({"op": "abort", "message": exc.message})
                overloaded.append(exc)
                return False
            w.send({"op": "arena", "path": str(w.arena.path), "size": w.arena.size})
            return True

        exchange = Exchange(
            w,
            requests,
            self._spec,
            wakeup=self._wakeup,
            calls=self._model.ctx.calls,
            grow=lambda handle, needed: self._grow(handle, needed),
            window=(int(message["inputs_end"]), int(message["limit"])),
            decoupled=self._spec.decoupled,
        )
        reply = exchange.run(grow)
        if reply is None:
            return list(each_request(self._died(w, requests), len(requests)))
        if overloaded:
            return list(each_request(overloaded[0], len(requests)))
        op = reply["op"]
        t2 = time.perf_counter_ns()
        if op == "returned":  # a decoupled batch: the responses went to each request's sink
            results: list[Result] = list(exchange.results)
        elif op == "failed":
            error = InternalError(f"Python model '{self._spec.name}' failed: {reply['message']}")
            log.error("%s failed %s: %s", self._label, describe([r.id for r in requests]), error)
            results = list(each_request(error, len(requests)))
        elif op == "result":
            assert w.space is not None
            results = transfer.read_outputs(w.space, reply["responses"], self._spec)
        else:
            raise InternalError(f"unexpected message '{op}' from the worker of {self._label}")
        t3 = time.perf_counter_ns()
        times.input_ns += t1 - t0
        times.infer_ns += t2 - t1
        times.output_ns += t3 - t2
        return results

    # -- decoupled models ------------------------------------------------------------------------

    def _submit(self, w: WorkerHandle, message: Message, requests: Sequence[InferRequest]) -> Any:
        """Register the batch with the worker's reader: stream numbers go into ``message``."""
        pump = self._pump
        if pump is None or pump.stopped.is_set():
            self._drop_pump()
            pump = self._pump = StreamPump(
                w,
                self._spec,
                calls=self._model.ctx.calls,
                make_arena=self._response_arena,
                label=self._label,
            )
        assert w.space is not None
        start, end = int(message["start"]), int(message["inputs_end"])
        holder = w.space.lend(start, end) if end > start else None
        keys, batch = pump.submit(requests, holder)
        for entry, key in zip(message["requests"], keys, strict=True):
            entry["stream"] = key
        return batch

    def _decoupled(
        self,
        w: WorkerHandle,
        batch: Any,
        requests: Sequence[InferRequest],
        times: ExecutionTimes,
        started: tuple[int, int],
    ) -> list[Result]:
        """Wait until ``execute`` returns; the responses go on through the worker's reader."""
        batch.done.wait()
        reply = batch.reply
        if reply is None:
            return list(each_request(self._died(w, requests), len(requests)))
        t2 = time.perf_counter_ns()
        times.input_ns += started[1] - started[0]
        times.infer_ns += t2 - started[1]
        if reply["op"] == "failed":
            error = InternalError(f"Python model '{self._spec.name}' failed: {reply['message']}")
            return list(each_request(error, len(requests)))
        return [{} for _ in requests]

    def _response_arena(self, needed: int, current: int) -> shm.Arena:
        size = self._model.settings.policy.next_size(current, needed)
        return shm.Arena.create(size, tag=self._model.arena_tag(self._group, self._index) + "-out")

    def _drop_pump(self) -> None:
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.join()

    def _grow(self, w: WorkerHandle, needed: int, minimum: int | None = None) -> None:
        """A new arena with room for ``needed`` bytes if allowed, else for ``minimum``.

        Also used with ``needed`` no bigger than the arena, when responses callers still hold
        leave no room: the new arena then has the same size."""
        policy = self._model.settings.policy
        current = w.arena.size
        try:
            size = policy.next_size(current, needed)
        except OverloadedError:
            if minimum is None or minimum >= needed:
                raise
            size = policy.next_size(current, minimum)
        bigger = shm.Arena.create(size, tag=self._model.arena_tag(self._group, self._index))
        if size <= current:
            log.debug("%s moves to a fresh arena: responses still use the old one", self._label)
        else:
            log.info(
                "shared-memory arena of %s grows from %s to %s",
                self._label,
                shm.human_bytes(current),
                shm.human_bytes(size),
            )
        w.replace_arena(bigger)  # the worker's mapping of the old one lives until it switches

    def _write_inputs(
        self,
        w: WorkerHandle,
        staged: list[tuple[shm.Staged, int]],
        requests: Sequence[InferRequest],
        needed: int,
    ) -> Message:
        assert w.space is not None
        arena_changed = False
        start, limit = w.space.largest_free()
        if limit - start < needed:
            if w.space.lent_spans():
                # Responses still use part of the arena (the caller, or the instance thread
                # until its next batch, holds them): make room for two batches, so the next
                # one fits beside this one and the arena is not replaced on every call.
                self._grow(w, 2 * needed, needed)
            else:
                self._grow(w, needed)
            arena_changed = True
            start, limit = 0, w.arena.size
        refs, end = transfer.write_inputs(w.arena, staged, len(requests), start)
        return {
            "op": "execute",
            "arena": [str(w.arena.path), w.arena.size] if arena_changed else None,
            "start": start,
            "inputs_end": end,
            "limit": limit,
            "requests": [
                {
                    "id": request.id,
                    "parameters_json": encode(request.parameters).decode(),
                    "outputs": self._requested(request),
                    "inputs": inputs,
                    **sequence_fields(request.parameters),
                }
                for request, inputs in zip(requests, refs, strict=True)
            ],
        }

    def _requested(self, request: InferRequest) -> list[str]:
        if request.outputs is None:
            return [t.name for t in self._spec.outputs]
        return [o.name for o in request.outputs]

    # -- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        self._closing = True
        acquired = self._lock.acquire(timeout=FINALIZE_TIMEOUT_S)
        try:
            w, self._worker = self._worker, None
            if w is None:
                return
            if acquired and w.alive() and self._pump is not None:
                self._pump.finalize(FINALIZE_TIMEOUT_S)
            elif acquired and w.alive():
                try:
                    w.send({"op": "finalize"})
                    deadline = time.monotonic() + FINALIZE_TIMEOUT_S
                    while (message := w.receive(max(0.0, deadline - time.monotonic()))) is not None:
                        if message["op"] == "bye":
                            break
                except OSError:
                    pass
            w.reap(timeout_s=2.0)
            self._drop_pump()
            w.release()
        finally:
            self._wakeup.close()
            if acquired:
                self._lock.release()
