"""One batch's conversation with a Python model's worker (server side, instance thread).

Besides the batch's ``result``, the worker may send, while the batch runs:

``response``  one response of a decoupled model's request (``index``, ``final``, ``error``,
              ``outputs`` in the arena): copied out and handed to the request's sink at once.
``room``      its window of the arena is full: granted once everything sent before is read
              (the window is free again), or with a bigger arena.
``infer``     a call to another model (business-logic scripting): run through the server's
              engine on the event loop; each of its responses goes back as a ``bls`` message
              whose tensors lie in a shared-memory segment of their own (the worker unlinks it
              after reading; any left when the batch ends are unlinked here).
``bls_cancel`` the model stopped reading a call.
``returned``  a decoupled model's ``execute`` is over; the batch ends when every request has
              sent its final response.

The instance thread waits on the socket, the worker's death and a wake-up pipe, through which
the event loop hands over the called models' responses and the clients' cancellations.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.base import Result, ThreadCalls
from inferd.backends.python import shm
from inferd.backends.python.protocol import Message, decode, error_from_wire
from inferd.backends.python.server.worker_handle import WorkerHandle
from inferd.core.inference import InferRequest, RequestedOutput
from inferd.core.model_spec import ModelSpec
from inferd.core.streaming import StreamedResponse
from inferd.errors import InferdError, InvalidArgumentError, OverloadedError, UnavailableError

_log = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]


class Wakeup:
    """A pipe and a queue: how other threads hand events to the instance thread."""

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._events: deque[tuple[Any, ...]] = deque()
        self._lock = threading.Lock()
        self._epoch = 0  # events of an older batch are dropped

    def begin(self) -> int:
        with self._lock:
            self._epoch += 1
            self._events.clear()
            return self._epoch

    def post(self, epoch: int, event: tuple[Any, ...]) -> None:
        with self._lock:
            if epoch != self._epoch:
                return
            self._events.append(event)
        with contextlib.suppress(OSError):  # a full pipe: a wake-up is pending anyway
            os.write(self._write_fd, b"x")

    def drain(self) -> list[tuple[Any, ...]]:
        try:
            while os.read(self.read_fd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        with self._lock:
            events = list(self._events)
            self._events.clear()
        return events

    def close(self) -> None:
        with self._lock:
            self._epoch += 1
        for fd in (self.read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def _poster(wakeup: Wakeup, epoch: int, event: tuple[Any, ...]) -> Callable[[], None]:
    return lambda: wakeup.post(epoch, event)


class Exchange:
    """Runs until the batch is answered; see the module doc."""

    def __init__(
        self,
        w: WorkerHandle,
        requests: Sequence[InferRequest],
        spec: ModelSpec,
        *,
        wakeup: Wakeup,
        calls: ThreadCalls | None,
        grow: Callable[[WorkerHandle, int], None],
        window: tuple[int, int],
        decoupled: bool,
    ) -> None:
        self._w = w
        self._requests = requests
        self._spec = spec
        self._wakeup = wakeup
        self._calls = calls
        self._grow = grow
        self._window = window
        self._decoupled = decoupled
        self._open = set(range(len(requests))) if decoupled else set()
        self._by_key: dict[int, InferRequest] = dict(enumerate(requests))
        self.results: list[Result] = [{} for _ in requests]
        self._returned: Message | None = None
        self._bls: dict[int, Callable[[], None]] = {}
        self._segments: list[Path] = []
        self._epoch = wakeup.begin()
        self._poller = select.poll()
        self._poller.register(w.conn.fileno(), select.POLLIN)
        if w.process.death_fd is not None:
            self._poller.register(w.process.death_fd, select.POLLIN)
        self._poller.register(wakeup.read_fd, select.POLLIN)
        if decoupled:
            for index, request in enumerate(requests):
                if request.sink is not None:
                    request.sink.watch(_poster(wakeup, self._epoch, ("cancel", index)))

    # -- the loop ----------------------------------------------------------------------------

    def run(self, handle_grow: Callable[[Message], bool]) -> Message | None:
        """The batch's last message (``result``, ``failed`` or ``returned``), or None if the
        worker died. ``handle_grow`` answers a ``grow`` (False: the batch is abandoned)."""
        try:
            while True:
                if self._returned is not None and not self._open:
                    return self._returned
                message = self._next()
                if message is None:
                    return None
                op = message["op"]
                if not self._served(op, message):
                    last = self._unserved(op, message, handle_grow)
                    if last is not None:
                        return last
        finally:
            self._finish()

    def _unserved(
        self, op: str, message: Message, handle_grow: Callable[[Message], bool]
    ) -> Message | None:
        """A message :meth:`_served` does not handle: the last message :meth:`run` returns, or
        None to read on."""
        if op == "grow":
            if not handle_grow(message):
                return {"op": "aborted"}
        elif op == "returned":
            self._returned = message  # the last, once every open request is final
        else:
            return message
        return None

    def _served(self, op: str, message: Message) -> bool:
        """Handle the messages a worker sends while its requests run (responses, calls to other
        models and their cancellations, requests for room); False for any other message."""
        if op == "response":
            self._response(message)
        elif op == "infer":
            self._infer(message)
        elif op == "bls_cancel":
            cancel = self._bls.pop(int(message["call"]), None)
            if cancel is not None:
                cancel()
        elif op == "room":
            self._room(int(message["needed"]))
        else:
            return False
        return True

    def _next(self) -> Message | None:
        conn_fd = self._w.conn.fileno()
        while True:
            ready = {fd for fd, _ in self._poller.poll()}
            if self._wakeup.read_fd in ready:
                for event in self._wakeup.drain():
                    self._event(event)
            if conn_fd in ready:
                try:
                    message = decode(self._w.conn.recv_bytes())
                except (EOFError, OSError):
                    return None
                self._w.forget_name()
                return message
            if ready - {self._wakeup.read_fd}:
                return None  # the process died (and the socket has nothing more)

    def _event(self, event: tuple[Any, ...]) -> None:
        kind = event[0]
        if kind == "cancel":
            index = int(event[1])
            if index in self._open:
                self._w.send({"op": "cancel", "index": index})
        elif kind == "bls":
            call, item = int(event[1]), event[2]
            if call in self._bls or item.final:
                self._answer_call(call, item)

    # -- decoupled responses -----------------------------------------------------------------

    def _response(self, message: Message) -> None:
        index = int(message["index"])
        final = bool(message.get("final"))
        if index not in self._open:
            return
        self._mapped()
        error: InferdError | None = None
        outputs: dict[str, Array] | None = None
        output_ns = 0
        if message.get("error"):
            error = error_from_wire(message["error"])
        elif message.get("outputs") is not None:
            start_ns = time.perf_counter_ns()
            try:
                outputs = self._read(message["outputs"])
            except InferdError as exc:
                error = exc
            output_ns = time.perf_counter_ns() - start_ns
        if final:
            self._open.discard(index)
        request = self._by_key[index]
        if final:
            self._closed(index)
        if request.sink is not None:
            request.sink.send(StreamedResponse(outputs, error, final, output_ns))
        elif error is not None and index < len(self.results):
            self.results[index] = error

    def _mapped(self) -> None:
        """A message that may carry tensors arrived (hook for the stream pump)."""

    def _closed(self, key: int) -> None:
        """Request ``key`` sent its final response (hook for the stream pump)."""

    def _out_arena(self) -> shm.Arena | None:
        """Where the worker writes responses and calls' inputs (None until it asks for room:
        zero-element tensors need none)."""
        space = self._w.space
        return None if space is None else space.arena

    def _read(self, wire: list[Any]) -> dict[str, Array]:
        arena = self._out_arena()
        outputs: dict[str, Array] = {}
        for item in wire:
            ref = shm.TensorRef.from_wire(item)
            declared = self._spec.output_by_name.get(ref.name)
            if declared is None:
                continue  # undeclared outputs are dropped, as for ordinary responses
            if declared.datatype.name != ref.datatype:
                raise InvalidArgumentError(
                    f"Python model '{self._spec.name}' sent output '{ref.name}' as "
                    f"{ref.datatype}, but the model configuration declares "
                    f"{declared.datatype.config_name}"
                )
            outputs[ref.name] = shm.read_any(arena, ref, copy=True)
        return outputs

    def _room(self, needed: int) -> None:
        start, limit = self._window
        if needed <= limit - start:
            self._w.send({"op": "room", "arena": None, "start": start, "limit": limit})
            return
        try:
            self._grow(self._w, needed)
        except OverloadedError as exc:
            self._w.send({"op": "abort", "message": exc.message})
            return
        arena = self._w.arena
        self._window = (0, arena.size)
        self._w.send(
            {"op": "room", "arena": [str(arena.path), arena.size], "start": 0, "limit": arena.size}
        )

    # -- calls to other models ---------------------------------------------------------------

    def _infer(self, message: Message) -> None:
        call = int(message["call"])
        try:
            request = self._call_request(message)
        except InferdError as exc:
            self._answer_call(call, StreamedResponse(None, exc, True))
            return
        if self._calls is None:
            error = UnavailableError("this server does not let models call other models")
            self._answer_call(call, StreamedResponse(None, error, True))
            return
        epoch, wakeup = self._epoch, self._wakeup
        timeout_us = int(message.get("timeout_us", 0))
        self._bls[call] = lambda: None
        self._bls[call] = self._calls.start(
            request,
            lambda item: wakeup.post(epoch, ("bls", call, item)),
            timeout_s=timeout_us / 1e6 if timeout_us > 0 else None,
        )

    def _call_request(self, message: Message) -> InferRequest:
        self._mapped()
        arena = self._out_arena()
        inputs: dict[str, Array] = {}
        for item in message.get("inputs") or []:
            ref = shm.TensorRef.from_wire(item)
            inputs[ref.name] = shm.read_any(arena, ref, copy=True)
        params = json.loads(message.get("parameters_json") or "{}")
        if not isinstance(params, dict) or not all(
            isinstance(v, bool | int | float | str) for v in params.values()
        ):
            raise InvalidArgumentError(
                "the parameters of a call to another model must be a JSON object of strings, "
                "numbers and booleans"
            )
        names = message.get("outputs")
        return InferRequest(
            model_name=str(message["model"]),
            inputs=inputs,
            model_version=str(message.get("version") or ""),
            id=str(message.get("id") or ""),
            outputs=[RequestedOutput(str(n)) for n in names] if names else None,
            parameters=params,
        )

    def _answer_call(self, call: int, item: StreamedResponse) -> None:
        if item.final:
            self._bls.pop(call, None)
        message: Message = {
            "op": "bls",
            "call": call,
            "final": item.final,
            "error": [item.error.code.value, item.error.message] if item.error else None,
            "outputs": None,
            "arena": None,
        }
        if item.outputs is not None and item.error is None:
            staged = [shm.stage(name, array) for name, array in item.outputs.items()]
            offsets, end = shm.layout(staged)
            refs = []
            if end:
                segment = shm.Arena.create(end, tag=f"{self._spec.name}-call")
                self._segments.append(segment.path)
                pairs = zip(staged, offsets, strict=True)
                refs = [shm.write(segment, s, o).to_wire() for s, o in pairs]
                segment.detach()
                message["arena"] = [str(segment.path), end]
            else:
                refs = [[s.name, s.datatype, list(s.shape), 0, 0] for s in staged]
            message["outputs"] = refs
        self._w.send(message)

    # -- the end -----------------------------------------------------------------------------

    def _finish(self) -> None:
        self._wakeup.begin()  # later events of this batch are dropped
        for cancel in self._bls.values():
            cancel()
        self._bls.clear()
        for path in self._segments:
            path.unlink(missing_ok=True)
        for index in sorted(self._open):
            request = self._by_key[index]
            if request.sink is not None:
                request.sink.send(
                    StreamedResponse(
                        None, UnavailableError("the model stopped before its final response"), True
                    )
                )
