"""The server's reader of a decoupled Python model's worker (one thread per worker).

A decoupled model's instance is free for its next batch as soon as ``execute`` returns; its
responses may keep flowing from the model's threads after that. So one thread per worker reads
the socket for the worker's whole life, and the instance thread only sends ``execute`` and waits
for the matching ``returned``:

- every request gets a stream number, unique for the worker; ``response`` messages name it, so
  responses of several batches may interleave, each request's in the order they were sent;
- a batch's inputs stay reserved in the arena (a lent span) until every request of the batch has
  sent its final response: the model's threads may still read them;
- responses and calls' inputs are written by the worker in an arena of their own (created on the
  first ``room`` request, replaced by a bigger one when needed), which the server copies out of
  as it reads, so it never competes with the inputs of the next batch;
- a worker that dies fails every open request (and the waiting batch, if any).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from inferd.backends.base import ThreadCalls
from inferd.backends.python import shm
from inferd.backends.python.protocol import Message
from inferd.backends.python.server.exchange import Exchange, Wakeup
from inferd.backends.python.server.worker_handle import WorkerHandle
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec
from inferd.errors import OverloadedError

_log = logging.getLogger(__name__)

#: The first size of the arena a decoupled worker writes its responses in.
OUT_ARENA_BYTES = 1 << 20

#: Makes an arena for at least ``needed`` bytes, given the current size (0: none yet).
MakeArena = Callable[[int, int], shm.Arena]


class _Batch:
    """One batch in flight: its ``returned`` message, and its inputs' span until all are final."""

    __slots__ = ("done", "holder", "keys", "reply")

    def __init__(self, keys: set[int], holder: Any) -> None:
        self.keys = keys
        self.holder = holder  # a view of the inputs' span: keeps it reserved
        self.reply: Message | None = None
        self.done = threading.Event()


class StreamPump(Exchange):
    """Reads one decoupled worker's socket until it dies or finalizes; see the module doc."""

    def __init__(
        self,
        w: WorkerHandle,
        spec: ModelSpec,
        *,
        calls: ThreadCalls | None,
        make_arena: MakeArena,
        label: str,
    ) -> None:
        self._wakeup_own = Wakeup()
        super().__init__(
            w,
            [],
            spec,
            wakeup=self._wakeup_own,
            calls=calls,
            grow=lambda handle, needed: None,
            window=(0, 0),
            decoupled=True,
        )
        self._make_arena = make_arena
        self._label = label
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: deque[_Batch] = deque()
        self._batches: dict[int, _Batch] = {}  # stream number -> its batch
        self._out: shm.Arena | None = None
        self._out_named = False
        self._bye = threading.Event()
        self.stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, name=f"inferd-pump {label}", daemon=True
        )
        self._thread.start()

    # -- the instance thread's side ------------------------------------------------------------

    def submit(self, requests: Sequence[InferRequest], holder: Any) -> tuple[list[int], _Batch]:
        """Stream numbers for ``requests`` (sent with ``execute``) and the batch to wait on."""
        keys = [next(self._ids) for _ in requests]
        batch = _Batch(set(keys), holder)
        with self._lock:
            self._waiting.append(batch)
            for key, request in zip(keys, requests, strict=True):
                self._by_key[key] = request
                self._open.add(key)
                self._batches[key] = batch
        for key, request in zip(keys, requests, strict=True):
            if request.sink is not None:
                request.sink.adopt()
                request.sink.watch(_cancel(self._wakeup_own, self._epoch, key))
        if self.stopped.is_set():  # died meanwhile: nobody will answer
            self._fail_waiting()
        return keys, batch

    def withdraw(self, batch: _Batch) -> None:
        """The batch's ``execute`` could not be sent: forget it."""
        with self._lock:
            if batch in self._waiting:
                self._waiting.remove(batch)
            for key in batch.keys:
                self._open.discard(key)
                self._by_key.pop(key, None)
                self._batches.pop(key, None)

    def finalize(self, timeout_s: float) -> None:
        """Ask the worker to finalize and wait for its ``bye`` (or its death)."""
        try:
            self._w.send({"op": "finalize"})
        except OSError:
            return
        self._bye.wait(timeout_s)

    def join(self, timeout_s: float = 5.0) -> None:
        self._thread.join(timeout_s)
        self._wakeup_own.close()

    # -- the pump thread -------------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            self.run(lambda message: False)
        except Exception:
            _log.exception("the reader of %s failed", self._label)
        finally:
            self.stopped.set()
            self._fail_waiting()
            self._bye.set()

    def _unserved(
        self, op: str, message: Message, handle_grow: Callable[[Message], bool]
    ) -> Message | None:
        """Reads on until the worker's ``bye`` (or its death): batches end with ``returned``."""
        if op in ("returned", "failed", "result"):
            self._batch_returned(message)
        elif op == "bye":
            return message
        elif op == "grow":
            self._w.send({"op": "abort", "message": "decoupled models do not grow"})
        else:
            _log.error("unexpected message '%s' from the worker of %s", op, self._label)
        return None

    def _finish(self) -> None:
        with self._lock:
            super()._finish()
        if self._out is not None:
            self._out.unlink()
            self._out.close()

    def _batch_returned(self, message: Message) -> None:
        with self._lock:
            batch = self._waiting.popleft() if self._waiting else None
        if batch is None:
            return
        batch.reply = message
        batch.done.set()

    def _fail_waiting(self) -> None:
        with self._lock:
            waiting, self._waiting = list(self._waiting), deque()
        for batch in waiting:
            batch.done.set()  # reply None: the worker died

    def _closed(self, key: int) -> None:
        with self._lock:
            self._by_key.pop(key, None)
            batch = self._batches.pop(key, None)
            if batch is None:
                return
            batch.keys.discard(key)
            if not batch.keys:
                batch.holder = None  # the inputs' span is free again

    # -- the responses' arena --------------------------------------------------------------------

    def _out_arena(self) -> shm.Arena | None:
        return self._out  # None until the worker asks for room (empty tensors need none)

    def _mapped(self) -> None:
        if self._out_named and self._out is not None:
            self._out.unlink()  # the worker has mapped it: no crash can leak it now
            self._out_named = False

    def _room(self, needed: int) -> None:
        current = 0 if self._out is None else self._out.size
        if self._out is not None and needed <= current:
            self._w.send({"op": "room", "arena": None, "start": 0, "limit": current})
            return
        try:
            arena = self._make_arena(max(needed, OUT_ARENA_BYTES), current)
        except OverloadedError as exc:
            self._w.send({"op": "abort", "message": exc.message})
            return
        old, self._out, self._out_named = self._out, arena, True
        if old is not None:
            old.unlink()
            old.close()
        reply = {"op": "room", "arena": [str(arena.path), arena.size], "start": 0}
        self._w.send({**reply, "limit": arena.size})


def _cancel(wakeup: Wakeup, epoch: int, key: int) -> Callable[[], None]:
    return lambda: wakeup.post(epoch, ("cancel", key))
