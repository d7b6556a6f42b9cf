"""Responses and calls that leave a Python model while it runs (worker process side).

:class:`Outbox` writes tensors into this batch's window of the arena (after its inputs) and
sends the message that points at them, under one lock, so the server reads them in the order
they were written; when the window is full it asks the server for ``room`` (which the server
grants once it has read everything sent before: the window is free again, or a bigger arena).
:class:`Streams` keeps the response senders of a decoupled model's batch, and :class:`Calls`
the model's calls to other models (business-logic scripting): they travel to the server over
the same channel, and the server answers each call with ``bls`` messages whose tensors lie in
a shared-memory segment of their own, read (copied) and unlinked here as they arrive.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.backends.python import shm
from inferd.backends.python.protocol import Message, encode, error_from_wire
from inferd.backends.python.worker.channel import Channel
from inferd.errors import InferdError, OverloadedError

if TYPE_CHECKING:
    from inferd.backends.python.worker.worker import Worker

Array = np.ndarray[Any, Any]


class Outbox:
    """Tensors into the current window of the arena, with the message that points at them."""

    def __init__(self, worker: Worker, channel: Channel, *, own_arena: bool = False) -> None:
        self._worker = worker
        self._channel = channel
        self.lock = threading.RLock()
        self.cursor = 0
        self.limit = 0
        # A decoupled model writes in an arena of its own, granted by the server on the first
        # ``room`` request: its threads may send after ``execute`` returned, while the next
        # batch's inputs arrive in the instance's arena.
        self._own_arena = own_arena
        self.arena: shm.Arena | None = None

    def _target(self) -> shm.Arena:
        arena = self.arena if self._own_arena else self._worker.arena
        assert arena is not None
        return arena

    def reset(self, start: int, limit: int) -> None:
        with self.lock:
            self.cursor, self.limit = start, limit

    def place(self, tensors: dict[str, Array]) -> list[list[Any]]:
        """Write ``tensors`` at the cursor (hold :attr:`lock` until their message is sent)."""
        staged = [shm.stage(name, array) for name, array in tensors.items()]
        offsets, end = shm.layout(staged, start=self.cursor)
        if end > self.limit:
            needed = shm.layout(staged)[1]
            self._channel.send({"op": "room", "needed": needed})
            reply = self._channel.next_reply()
            if reply["op"] != "room":
                raise OverloadedError(str(reply.get("message", "no room for the outputs")))
            if reply.get("arena"):
                path, size = reply["arena"]
                if self._own_arena:
                    old, self.arena = self.arena, shm.Arena.attach(path, int(size))
                    if old is not None:
                        self._worker.retired.append(old)
                else:
                    self._worker.switch_arena(path, int(size))
            self.cursor, self.limit = int(reply["start"]), int(reply["limit"])
            offsets, end = shm.layout(staged, start=self.cursor)
        if all(item.nbytes == 0 for item in staged):
            # only zero-element tensors: nothing to copy, and perhaps no arena granted yet
            return [
                shm.TensorRef(item.name, item.datatype, item.shape, offset, 0).to_wire()
                for item, offset in zip(staged, offsets, strict=True)
            ]
        arena = self._target()
        pairs = zip(staged, offsets, strict=True)
        refs = [shm.write(arena, item, offset).to_wire() for item, offset in pairs]
        self.cursor = end
        return refs

    def send(self, message: Message, tensors: dict[str, Array] | None) -> None:
        with self.lock:
            message["outputs"] = None if tensors is None else self.place(tensors)
            self._channel.send(message)


def wire_error(exc: BaseException) -> list[str]:
    if isinstance(exc, InferdError):
        return [exc.code.value, exc.message]
    return ["INTERNAL", f"{type(exc).__name__}: {exc}"]


class Streams:
    """The open requests of a decoupled model (by stream number, unique for the worker):
    which ones still await their final. Requests of several batches may be open at once."""

    def __init__(self, channel: Channel, outbox: Outbox) -> None:
        self._channel = channel
        self._outbox = outbox
        self._lock = threading.Lock()
        self._open: set[int] = set()
        self._returned = True  # execute() has returned (or there is no batch)

    @property
    def active(self) -> bool:
        with self._lock:
            return bool(self._open) or not self._returned

    def begin(self, keys: list[int]) -> None:
        with self._lock:
            self._open.update(keys)
            self._returned = False

    def returned(self) -> None:
        with self._lock:
            self._returned = True

    def is_open(self, index: int) -> bool:
        with self._lock:
            return index in self._open

    def is_cancelled(self, index: int) -> bool:
        self._channel.poll()
        return index in self._channel.cancelled

    def send(
        self,
        index: int,
        outputs: dict[str, Array] | None,
        error: BaseException | list[str] | None,
        final: bool,
    ) -> bool:
        """Send one response of request ``index``; False if it is closed (already final)."""
        with self._lock:
            if index not in self._open:
                return False
            if final:
                self._open.discard(index)
        if final:
            self._channel.cancelled.discard(index)
        elif index in self._channel.cancelled:
            return True  # the client is gone: nothing more is sent but the final flag
        wire = error if isinstance(error, list) or error is None else wire_error(error)
        message: Message = {"op": "response", "index": index, "final": final, "error": wire}
        self._outbox.send(message, None if wire is not None else outputs)
        return True

    def fail_open(self, keys: list[int], error: BaseException) -> None:
        """Close the requests of ``keys`` still open with ``error`` (execute raised)."""
        with self._lock:
            left = sorted(self._open.intersection(keys))
        for index in left:
            self.send(index, None, error, True)


class Calls:
    """This model's calls to other models, through the server's engine."""

    def __init__(self, channel: Channel, outbox: Outbox, worker: Worker) -> None:
        self._channel = channel
        self._outbox = outbox
        self._worker = worker
        self._ids = itertools.count(1)

    def start(
        self,
        model: str,
        inputs: dict[str, Array],
        *,
        outputs: list[str] | None,
        version: str = "",
        request_id: str = "",
        parameters: dict[str, Any] | None = None,
        timeout_us: int = 0,
    ) -> int:
        """Send a call; its number, to read the answers with :meth:`next`."""
        if not self._worker.in_batch:
            raise RuntimeError(
                "a model can call other models only while it executes requests (not in "
                "initialize, finalize or after execute has returned)"
            )
        call = next(self._ids)
        self._channel.open_call(call)
        message: Message = {
            "op": "infer",
            "call": call,
            "model": model,
            "version": version,
            "id": request_id,
            "outputs": outputs,
            "parameters_json": encode(parameters or {}).decode(),
            "timeout_us": max(0, int(timeout_us)),
        }
        with self._outbox.lock:
            message["inputs"] = self._outbox.place(inputs)
            self._channel.send(message)
        return call

    def next(self, call: int) -> tuple[dict[str, Array] | None, InferdError | None, bool]:
        """The next answer of ``call``: (outputs, error, final)."""
        message = self._channel.next_for_call(call)
        error = error_from_wire(message["error"]) if message.get("error") else None
        final = bool(message.get("final", True))
        if final:
            self._channel.close_call(call)
        return message.get("tensors"), error, final

    def cancel(self, call: int) -> None:
        self._channel.send({"op": "bls_cancel", "call": call})
        self._channel.close_call(call)

    def iterate(self, call: int) -> Iterator[tuple[dict[str, Array] | None, InferdError | None]]:
        while True:
            outputs, error, final = self.next(call)
            if outputs is not None or error is not None:
                yield outputs, error
            if final:
                return


def read_call_answer(message: Message) -> Message:
    """Copy the tensors of a ``bls`` message out of their segment (then unlinked)."""
    arena_info = message.get("arena")
    refs = message.get("outputs")
    if refs is None:
        message["tensors"] = None
        return message
    tensors: dict[str, Array] = {}
    if arena_info:
        path, size = arena_info
        arena = shm.Arena.attach(path, int(size))
        try:
            for item in refs:
                ref = shm.TensorRef.from_wire(item)
                tensors[ref.name] = shm.read(arena, ref, copy=True)
        finally:
            arena.unlink()
            arena.close()
    else:  # only empty tensors
        for item in refs:
            ref = shm.TensorRef.from_wire(item)
            dtype = np.dtype(object) if ref.datatype == "BYTES" else None
            tensors[ref.name] = _empty(ref, dtype)
    message["tensors"] = tensors
    return message


def _empty(ref: shm.TensorRef, dtype: Any) -> Array:
    from inferd.core import datatypes

    return np.empty(ref.shape, dtype=dtype or datatypes.from_name(ref.datatype).dtype)
