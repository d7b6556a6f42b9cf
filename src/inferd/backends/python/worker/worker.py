"""The main of a Python model worker process (one per model instance).

Started by :mod:`inferd.backends.python.server.launcher`: forked by the zygote
(``serve_channel``) or run as ``python -m inferd.backends.python.worker <fd>`` (``spawn``, see
``__main__.py``); never through multiprocessing, so the server's ``__main__`` is never imported
here. The first message on the socket is the init message; the worker imports the user's
``model.py``, runs ``initialize`` (or the typed API's ``setup``), then answers ``execute``
messages until told to finalize or until the server goes away (EOF on the socket). Tensors are
read from and written to the instance's shared-memory arena; see ``protocol.py`` for the
messages. Outputs that are views of this batch's inputs (an identity model) are not copied:
their place in the arena is sent back as is.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import signal
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.batching import check_rows, split_outputs
from inferd.backends.execution import RetryPolicy, run_batch
from inferd.backends.python import api, shm
from inferd.backends.python.protocol import Message, decode, encode
from inferd.backends.python.worker import triton_python_backend_utils as pb_utils
from inferd.backends.python.worker.channel import Channel, ChannelClosed
from inferd.backends.python.worker.streaming import Calls, Outbox, Streams, read_call_answer
from inferd.backends.python.worker.user_model import find_model_class, load_module
from inferd.errors import InferdError, InvalidArgumentError

Array = np.ndarray[Any, Any]
WireError = tuple[str, str]  # (code, message)
Outcome = dict[str, Array] | WireError  # one request's answer

#: When the model's code runs again. A batch runs request by request only when the model raised
#: ``InvalidArgumentError`` (``inferd.errors``): the request's content is at fault, and running
#: each request alone finds which. Any other exception fails every request of the batch, and the
#: model's code is not run again (a fault would repeat, and so would its side effects).
USER_CODE_POLICY = RetryPolicy(per_request=(InvalidArgumentError,), caught=(Exception,))

_log = logging.getLogger("inferd.python_worker")


class _Abort(Exception):
    """The server refused to grow the arena: drop this batch's outputs."""


def _error(exc: BaseException) -> WireError:
    if isinstance(exc, InferdError):
        return (exc.code.value, exc.message)
    return ("INTERNAL", f"{type(exc).__name__}: {exc}")


class Worker:
    def __init__(self, conn: Connection, init: dict[str, Any]) -> None:
        self.conn = conn
        self.init = init
        self.name: str = init["model_name"]
        self.arena: shm.Arena | None = None
        self.retired: list[shm.Arena] = []  # grown-out arenas still pinned by model-held views
        self._batch_arena: shm.Arena | None = None  # the arena the current batch arrived in
        self.model: Any = None
        self.typed = False
        self.batching = int(init.get("max_batch_size", 0)) > 0
        self.decoupled = bool(init.get("decoupled", False))
        self.channel = Channel(conn, prepare=read_call_answer)
        self.outbox = Outbox(self, self.channel, own_arena=self.decoupled)
        self.streams = Streams(self.channel, self.outbox)
        self.calls = Calls(self.channel, self.outbox, self)
        self._executing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        pb_utils.attach_runtime(self)
        api.attach_runtime(self)

    @property
    def in_batch(self) -> bool:
        """A batch is being served: the model may call other models."""
        return self._executing or (self.decoupled and self.streams.active)

    def run_maybe_async(self, result: Any) -> Any:
        """The value of ``result``, awaited on this worker's event loop if it is a coroutine
        (``async def execute``)."""
        if not inspect.isawaitable(result):
            return result
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(result)

    # -- lifecycle ---------------------------------------------------------------------------

    def send(self, message: Message) -> None:
        self.channel.send(message)

    def receive(self) -> Message:
        return self.channel.next_main()

    def start(self) -> None:
        model_file = Path(self.init["model_file"])
        module = load_module(model_file, f"inferd_model_{self.init['module_tag']}")
        cls = find_model_class(module, model_file)
        self.typed = issubclass(cls, api.Model)
        self.model = cls()
        if self.typed:
            args = self.init["args"]
            context = api.ModelContext(
                model_name=self.name,
                model_version=int(args["model_version"]),
                instance_name=args["model_instance_name"],
                instance_kind=args["model_instance_kind"],
                device_id=int(args["model_instance_device_id"]),
                model_dir=Path(args["model_repository"]),
                max_batch_size=int(self.init.get("max_batch_size", 0)),
                config=self.init["config"],
                parameters=dict(self.init.get("parameters", {})),
            )
            self.model.setup(context)
        elif hasattr(self.model, "initialize"):
            self.model.initialize(dict(self.init["args"]))
        path, size = self.init["arena"]
        self.arena = shm.Arena.attach(path, size)

    def finalize(self) -> None:
        hook = "teardown" if self.typed else "finalize"
        method = getattr(self.model, hook, None)
        if method is not None:
            try:
                method()
            except Exception:
                _log.exception("%s() of Python model '%s' raised", hook, self.name)

    def serve(self) -> None:
        while True:
            try:
                message = self.receive()
            except (ChannelClosed, EOFError, OSError):
                return  # the server is gone
            op = message["op"]
            if op == "execute":
                self.execute(message)
            elif op == "finalize":
                self.finalize()
                self.send({"op": "bye"})
                return
            self._sweep()

    # -- arenas ------------------------------------------------------------------------------

    def switch_arena(self, path: str, size: int) -> None:
        """Map ``path`` as the current arena; the old mapping lives on while views pin it."""
        old = self.arena
        self.arena = shm.Arena.attach(path, size)
        if old is not None:
            self.retired.append(old)

    def _sweep(self) -> None:
        self.retired = [a for a in self.retired if not a.close()]

    # -- execute -----------------------------------------------------------------------------

    def execute(self, message: Message) -> None:
        if message.get("arena"):
            path, size = message["arena"]
            self.switch_arena(path, size)
        arena = self.arena
        assert arena is not None
        self._batch_arena = arena
        requests: list[dict[str, Any]] = message["requests"]
        refs = [[shm.TensorRef.from_wire(r) for r in req["inputs"]] for req in requests]
        ids = [str(req.get("id", "")) for req in requests]
        if self.decoupled:
            self._execute_decoupled(requests, refs)
            return
        self.outbox.reset(int(message.get("inputs_end", 0)), int(message.get("limit", arena.size)))
        self._executing = True
        try:
            if self.typed:
                results = self._predict(refs, ids)
            else:
                results = self._execute_triton(requests, refs, ids)
        except Exception as exc:  # inferd's own failure around the model's code
            traceback.print_exc()
            self._executing = False
            self.send({"op": "failed", "message": f"{type(exc).__name__}: {exc}"})
            return
        self._executing = False
        try:
            self.send({"op": "result", "responses": self._write_outputs(results, message)})
        except _Abort:
            return

    def _execute_decoupled(
        self, requests: list[dict[str, Any]], refs: list[list[shm.TensorRef]]
    ) -> None:
        """Responses leave as the model sends them; ``returned`` tells the server that
        ``execute`` is over (requests still open are answered later, from the model's threads).
        """
        from inferd.backends.python.worker.decoupled import run_decoupled

        keys = [int(req["stream"]) for req in requests]
        self.streams.begin(keys)
        try:
            run_decoupled(self, requests, refs)
        except Exception as exc:
            traceback.print_exc()
            self.streams.fail_open(keys, exc)
        finally:
            self.streams.returned()
            self.send({"op": "returned"})

    def _execute_triton(
        self, requests: list[dict[str, Any]], refs: list[list[shm.TensorRef]], ids: list[str]
    ) -> list[Outcome]:
        """``execute`` gets the whole batch; it runs again per request only under the rule of
        :data:`USER_CODE_POLICY`."""
        items = list(zip(requests, refs, strict=True))
        return run_batch(
            items,
            stacked=self._triton_batch,
            alone=lambda item: self._triton_batch([item])[0],
            answer=_error,
            ids=lambda: ids,
            model=self.name,
            policy=USER_CODE_POLICY,
        )

    def _triton_batch(
        self, items: Sequence[tuple[dict[str, Any], list[shm.TensorRef]]]
    ) -> list[Outcome]:
        arena = self.arena
        assert arena is not None
        batch = [
            pb_utils.InferenceRequest(
                inputs=[pb_utils.Tensor(r.name, shm.read(arena, r, copy=False)) for r in rs],
                request_id=req.get("id", ""),
                requested_output_names=req.get("outputs", []),
                model_name=self.name,
                parameters=req.get("parameters_json", "{}"),
                correlation_id=req.get("correlation_id", 0),
                flags=int(req.get("flags", 0)),
            )
            for req, rs in items
        ]
        responses = self.run_maybe_async(self.model.execute(batch))
        if not isinstance(responses, list | tuple) or len(responses) != len(batch):
            got = len(responses) if isinstance(responses, list | tuple) else type(responses)
            raise TypeError(
                f"execute() must return a list of {len(batch)} InferenceResponse, got {got}"
            )
        results: list[Outcome] = []
        for response in responses:
            if not isinstance(response, pb_utils.InferenceResponse):
                kind = type(response).__name__
                results.append(("INTERNAL", f"execute() returned {kind}, not an InferenceResponse"))
                continue
            error = response.error()
            if error is not None:
                code = error.code() if isinstance(error, pb_utils.TritonError) else 1
                results.append((pb_utils.ERROR_CODE_NAMES.get(code, "INTERNAL"), str(error)))
                continue
            outputs: dict[str, Array] = {}
            for tensor in response.output_tensors():
                if not isinstance(tensor, pb_utils.Tensor):
                    raise TypeError("output_tensors must hold pb_utils.Tensor objects")
                outputs[tensor.name()] = tensor.as_numpy()
            results.append(outputs)
        return results

    def _predict(self, refs: list[list[shm.TensorRef]], ids: list[str]) -> list[Outcome]:
        """A batching model's ``predict`` sees the batch stacked (a zero-copy view); it runs
        again per request only under the rule of :data:`USER_CODE_POLICY`."""
        stack = self._stack(refs) if len(refs) > 1 and self.batching else None

        def stacked(_: Sequence[list[shm.TensorRef]]) -> list[dict[str, Array]]:
            assert stack is not None
            inputs, rows = stack
            return split_outputs(self._call_predict(inputs), rows, self.name)

        def alone(rs: list[shm.TensorRef]) -> dict[str, Array]:
            inputs = {r.name: self._view(r) for r in rs}
            outputs = self._call_predict(inputs)
            if self.batching and inputs:
                check_rows(outputs, next(iter(inputs.values())).shape[0], self.name)
            return outputs

        return run_batch(
            refs,
            stacked=stacked if stack is not None else None,
            alone=alone,
            answer=_error,
            ids=lambda: ids,
            model=self.name,
            policy=USER_CODE_POLICY,
        )

    def _view(self, ref: shm.TensorRef) -> Array:
        assert self.arena is not None
        array = shm.read(self.arena, ref, copy=False)
        array.flags.writeable = False
        return array

    def _stack(self, refs: list[list[shm.TensorRef]]) -> tuple[dict[str, Array], list[int]] | None:
        """The batch as one array per input: a zero-copy view when the server laid the
        requests out back to back (it does), a concatenation otherwise; None if they differ."""
        names = [r.name for r in refs[0]]
        rows: list[int] = []
        for rs in refs:
            if [r.name for r in rs] != names or not rs:
                return None
            rows.append(rs[0].shape[0] if rs[0].shape else 1)
        inputs: dict[str, Array] = {}
        for position, name in enumerate(names):
            column = [rs[position] for rs in refs]
            first = column[0]
            if any(
                r.datatype != first.datatype or r.shape[1:] != first.shape[1:] or not r.shape
                for r in column
            ):
                return None
            contiguous = first.datatype != "BYTES" and all(
                a.offset + a.nbytes == b.offset for a, b in itertools.pairwise(column)
            )
            if contiguous:
                total = sum(r.shape[0] for r in column)
                merged = shm.TensorRef(
                    name,
                    first.datatype,
                    (total, *first.shape[1:]),
                    first.offset,
                    sum(r.nbytes for r in column),
                )
                inputs[name] = self._view(merged)
            else:
                inputs[name] = np.concatenate([self._view(r) for r in column])
        return inputs, rows

    def _call_predict(self, inputs: dict[str, Array]) -> dict[str, Array]:
        outputs = self.model.predict(inputs)
        if not isinstance(outputs, dict):
            raise TypeError(f"predict() must return a dict of arrays, got {type(outputs).__name__}")
        return {
            str(name): value if isinstance(value, np.ndarray) else np.asarray(value)
            for name, value in outputs.items()
        }

    # -- outputs -----------------------------------------------------------------------------

    def _place(
        self, name: str, array: Array, window: tuple[int, int]
    ) -> shm.TensorRef | shm.Staged:
        """Where the server finds ``array``: in place if it is a view of this batch's inputs,
        else staged to be copied after them."""
        assert self.arena is not None
        ref = shm.locate(self.arena, name, array, *window)
        return ref if ref is not None else shm.stage(name, array)

    def _write_outputs(self, results: Sequence[Outcome], message: Message) -> list[dict[str, Any]]:
        with self.outbox.lock:
            return self._write_outputs_locked(results, message)

    def _write_outputs_locked(
        self, results: Sequence[Outcome], message: Message
    ) -> list[dict[str, Any]]:
        start, inputs_end = int(message.get("start", 0)), int(message.get("inputs_end", 0))
        if self.arena is not self._batch_arena:  # moved to a bigger arena during the batch
            start = inputs_end = 0
        placed: list[list[shm.TensorRef | shm.Staged] | WireError] = []
        for result in results:
            if isinstance(result, tuple):
                placed.append(result)
                continue
            try:
                placed.append([self._place(n, a, (start, inputs_end)) for n, a in result.items()])
            except Exception as exc:
                placed.append(_error(exc))
        items = [item for entry in placed if isinstance(entry, list) for item in entry]
        copies = [item for item in items if isinstance(item, shm.Staged)]
        arena = self.arena
        assert arena is not None
        limit = self.outbox.limit
        offsets, end = shm.layout(copies, start=self.outbox.cursor)
        if end > limit:
            # Ask for room for inputs *and* outputs, so the next batch like this one fits
            # without growing again. This batch's outputs all go (copied, in-place ones too:
            # they live in the old arena) at the start of the new arena.
            copies = [
                shm.stage(item.name, shm.read(arena, item, copy=False))
                if isinstance(item, shm.TensorRef)
                else item
                for item in items
            ]
            offsets, minimum = shm.layout(copies, start=0)
            needed = self.outbox.cursor - start + minimum
            self.send({"op": "grow", "needed": needed, "minimum": minimum})
            reply = self.channel.next_reply()
            if reply["op"] != "arena":
                raise _Abort
            self.switch_arena(reply["path"], int(reply["size"]))
            arena = self.arena
            assert arena is not None
            swapped = iter(copies)
            placed = [
                entry if isinstance(entry, tuple) else [next(swapped) for _ in entry]
                for entry in placed
            ]
        positions = iter(offsets)
        responses: list[dict[str, Any]] = []
        for entry in placed:
            if isinstance(entry, tuple):
                responses.append({"error": list(entry), "outputs": []})
                continue
            refs = [
                item.to_wire()
                if isinstance(item, shm.TensorRef)
                else shm.write(arena, item, next(positions)).to_wire()
                for item in entry
            ]
            responses.append({"error": None, "outputs": refs})
        return responses


def auto_complete(conn: Connection, init: dict[str, Any]) -> None:
    """Run the model's ``auto_complete_config`` on the config and send the result back."""
    model_file = Path(init["model_file"])
    module = load_module(model_file, f"inferd_model_{init['module_tag']}")
    cls = find_model_class(module, model_file)
    builder = pb_utils.ModelConfig(init["config"])
    method = getattr(cls, "auto_complete_config", None)
    if method is not None:
        result = method(builder)
        if isinstance(result, pb_utils.ModelConfig):
            builder = result
    conn.send_bytes(encode({"op": "config", "config": builder.as_dict()}))


def run(conn: Connection, init: dict[str, Any]) -> None:
    """Serve one instance (or one ``auto_complete_config``) over ``conn``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when workers stop
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s [python model] %(message)s"
        )
    if init["mode"] == "auto_complete":
        try:
            auto_complete(conn, init)
        except BaseException as exc:
            conn.send_bytes(encode({"op": "init_error", "message": f"{type(exc).__name__}: {exc}"}))
        return
    worker = Worker(conn, init)
    try:
        worker.start()
    except BaseException as exc:
        traceback.print_exc()
        conn.send_bytes(encode({"op": "init_error", "message": f"{type(exc).__name__}: {exc}"}))
        return
    conn.send_bytes(encode({"op": "ready"}))
    worker.serve()


def serve_channel(fd: int, name: str = "") -> int:
    """Process entry point: serve the socket ``fd``, whose first message is the init message.
    Returns the exit code."""
    conn = Connection(fd)
    try:
        init = decode(conn.recv_bytes())
    except (EOFError, OSError):
        return 0  # the server went away before sending anything
    try:
        run(conn, init)
    finally:
        conn.close()
    return 0


def main(argv: Sequence[str]) -> int:
    """``python -m inferd.backends.python.worker <fd> [name]`` (the ``spawn`` start)."""
    return serve_channel(int(argv[0]), argv[1] if len(argv) > 1 else "")
