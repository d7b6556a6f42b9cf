"""Python backend: ``backend: "python"`` with a ``model.py`` per version.

Python code holds the GIL, so each instance of a Python model runs in its own worker process
(``worker.py``), started when the model loads. The instance object living in the server only
moves tensors: it copies the batch's inputs into the instance's shared-memory arena (``shm.py``),
sends a small JSON message with their offsets (``protocol.py``), blocks on the pipe *and* the
process sentinel until the worker answers, and copies the outputs back out of the arena.

A worker that dies while executing fails only that batch, with an error that says so, and is
restarted at once (``initialize`` runs again in the new process); the model stays READY. A worker
found dead while idle is restarted before the next batch, which then runs normally.

Config ``parameters`` read by the backend (all optional; the model sees every parameter too):

``shm-default-byte-size``  first size of each instance's arena (default 16 MiB)
``shm-max-byte-size``      cap on an arena's growth (default: half the free space of /dev/shm)
``worker-start-method``    ``forkserver`` (default) or ``spawn``
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import re
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import json_format

from inferd.backends.base import ExecutionTimes, LoadContext, Result
from inferd.backends.python import shm, worker
from inferd.backends.python.protocol import Message, decode, encode, error_from_wire
from inferd.codecs.model_config import to_json_dict
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.core.validation import validate_request
from inferd.errors import (
    ConfigError,
    InferdError,
    InternalError,
    ModelLoadError,
    OverloadedError,
    UnavailableError,
)

log = logging.getLogger(__name__)

START_METHODS = ("forkserver", "spawn")
#: How long ``finalize()`` may take at unload before the worker is killed.
FINALIZE_TIMEOUT_S = 30.0
#: How long ``auto_complete_config`` may take.
AUTO_COMPLETE_TIMEOUT_S = 120.0

_KINDS = {"KIND_CPU": "CPU", "KIND_GPU": "GPU", "KIND_MODEL": "MODEL", "KIND_AUTO": "CPU"}

_preload_lock = threading.Lock()


def _context(method: str) -> BaseContext:
    """The multiprocessing context for workers; never ``fork`` (the server has threads).

    With ``forkserver`` the server preloads numpy and the worker module once; every worker is
    forked from that clean, single-threaded process, so instances share those pages.
    """
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        with _preload_lock:
            ctx.set_forkserver_preload([worker.__name__])
    return ctx


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit code unknown"
    if exitcode < 0:
        try:
            return f"exit code {exitcode}, killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"exit code {exitcode}"
    return f"exit code {exitcode}"


# -- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PythonSettings:
    start_method: str = "forkserver"
    policy: shm.ArenaPolicy = field(default_factory=shm.ArenaPolicy)


def _size_param(params: dict[str, str], key: str, default: int, minimum: int) -> int:
    raw = params.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"parameter '{key}' must be a number of bytes, got '{raw}'") from None
    if value < minimum:
        raise ConfigError(f"parameter '{key}' must be at least {minimum} bytes, got '{raw}'")
    return value


def parse_settings(spec: ModelSpec) -> PythonSettings:
    params = spec.parameters
    method = params.get("worker-start-method", "forkserver").strip()
    if method not in START_METHODS:
        raise ConfigError(
            f"parameter 'worker-start-method' must be one of {', '.join(START_METHODS)} "
            f"(never fork: the server has threads), got '{method}'"
        )
    initial = _size_param(params, "shm-default-byte-size", shm.DEFAULT_INITIAL_BYTES, 4096)
    cap = _size_param(params, "shm-max-byte-size", 0, 0)
    if cap and cap < initial:
        raise ConfigError(
            f"parameter 'shm-max-byte-size' ({cap}) is smaller than 'shm-default-byte-size' "
            f"({initial})"
        )
    return PythonSettings(method, shm.ArenaPolicy(initial_bytes=initial, max_bytes=cap))


# -- one worker process --------------------------------------------------------------------------


class _Worker:
    """A started worker process, its end of the pipe and its arena (owned here)."""

    def __init__(self, process: Any, conn: Connection, arena: shm.Arena | None) -> None:
        self.process = process
        self.conn = conn
        self.arena = arena
        self.ready = False
        self.named = arena is not None  # the arena's file still has its name in /dev/shm

    def forget_name(self) -> None:
        """Unlink the arena's file once the worker has mapped it: from then on no crash of
        either process can leak it (the memory goes with the last mapping)."""
        if self.named and self.arena is not None:
            self.arena.unlink()
            self.named = False

    def send(self, message: Message) -> None:
        self.conn.send_bytes(encode(message))

    def receive(self, timeout_s: float | None = None) -> Message | None:
        """The next message, or None if the process died (or ``timeout_s`` passed).

        Blocks on the pipe and on the process sentinel together: no polling.
        """
        ready = wait([self.conn, self.process.sentinel], timeout_s)
        if self.conn in ready:
            try:
                return decode(self.conn.recv_bytes())
            except (EOFError, OSError):
                return None
        return None

    def reap(self, timeout_s: float = 5.0) -> int | None:
        """Make sure the process is gone; its exit code."""
        self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout_s)
        return int(self.process.exitcode) if self.process.exitcode is not None else None

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        if self.arena is not None:
            self.arena.close()
            self.arena = None


def _launch(ctx: BaseContext, init: dict[str, Any], arena: shm.Arena | None, name: str) -> _Worker:
    if arena is not None:
        init = {**init, "arena": [str(arena.path), arena.size]}
    parent, child = ctx.Pipe(duplex=True)
    process = ctx.Process(  # type: ignore[attr-defined]
        target=worker.run, args=(child, encode(init)), name=name, daemon=True
    )
    try:
        process.start()
    except Exception:
        parent.close()
        if arena is not None:
            arena.close()
        raise
    finally:
        child.close()
    return _Worker(process, parent, arena)


def _await_ready(w: _Worker, index: int) -> str | None:
    """Wait for a started worker to initialise: None when ready, else why not (and it is
    cleaned up)."""
    if w.ready:
        return None
    message = w.receive()
    if message is not None and message["op"] == "ready":
        w.ready = True
        w.forget_name()
        return None
    if message is not None and message["op"] == "init_error":
        reason = f"initialize() of instance {index} failed: {message['message']}"
    else:
        reason = (
            f"the worker process of instance {index} died while starting "
            f"({describe_exit(w.reap())})"
        )
    w.reap()
    w.release()
    return reason


# -- the protocols -------------------------------------------------------------------------------


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
        self._worker: _Worker | None = None
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        worker_ = self._worker
        return None if worker_ is None else int(worker_.process.pid)

    # -- starting ----------------------------------------------------------------------------

    def start(self, launched: _Worker | None = None) -> None:
        """Adopt a pre-launched worker (or launch one) and wait until it has initialised."""
        self._worker = launched or self._model.launch(self._group, self._index)
        self._await_ready(self._worker, loading=True)

    def _await_ready(self, w: _Worker, *, loading: bool) -> None:
        reason = _await_ready(w, self._index)
        if reason is None:
            return
        self._worker = None
        if loading:  # the loader prefixes "failed to load '<model>' version <n>: "
            raise InternalError(reason)
        raise UnavailableError(
            f"the Python model worker for {self._label} could not be restarted: {reason}"
        )

    def _ready_worker(self) -> _Worker:
        """The worker, (re)started and initialised if needed (blocking)."""
        w = self._worker
        if w is not None and w.ready and not w.process.is_alive():
            log.error(
                "the Python model worker for %s died while idle (%s); restarting it",
                self._label,
                describe_exit(w.reap()),
            )
            w.release()
            w = self._worker = None
        if w is None:
            self.restarts += 1
            w = self._worker = self._model.launch(self._group, self._index)
        if not w.ready:
            self._await_ready(w, loading=False)
        return w

    def _died(self, w: _Worker) -> InternalError:
        """Fail the in-flight batch; restart now unless the model is unloading."""
        exitcode = w.reap()
        w.release()
        self._worker = None
        what = describe_exit(exitcode)
        if self._closing:
            return InternalError(
                f"the Python model worker for {self._label} stopped ({what}) while the model "
                "was unloading"
            )
        log.error("the Python model worker for %s died (%s); restarting it", self._label, what)
        try:
            self.restarts += 1
            self._worker = self._model.launch(self._group, self._index)  # initialises meanwhile
        except Exception:
            log.exception("restarting the Python model worker for %s failed", self._label)
        return InternalError(
            f"the Python model worker for {self._label} died ({what}) while executing; "
            "it is being restarted"
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
                if self._closing:
                    answers: list[Result] = [UnavailableError(f"model {self._label} is unloading")]
                    answers *= len(good)
                else:
                    try:
                        answers = self._round_trip([requests[i] for i in good], times)
                    except InferdError as exc:
                        answers = [exc] * len(good)
            for i, answer in zip(good, answers, strict=True):
                results[i] = answer
        return [r for r in results if r is not None]

    def _round_trip(self, requests: Sequence[InferRequest], times: ExecutionTimes) -> list[Result]:
        t0 = time.perf_counter_ns()
        staged = self._stage(requests)
        needed = shm.layout(item for item, _ in staged)[1]
        for attempt in (1, 2):
            w = self._ready_worker()
            assert w.arena is not None
            new_arena = None
            if needed > w.arena.size:
                new_arena = self._grow(w, needed)
            message = self._write_inputs(w, staged, requests, new_arena is not None)
            try:
                w.send(message)
                break
            except OSError:  # died while idle, between the check and the send: nothing ran
                log.error("the Python model worker for %s was gone; restarting it", self._label)
                w.reap()
                w.release()
                self._worker = None
                if attempt == 2:
                    raise UnavailableError(
                        f"the Python model worker for {self._label} cannot be reached"
                    ) from None
        t1 = time.perf_counter_ns()
        while True:
            reply = w.receive()
            if reply is None:
                return [self._died(w)] * len(requests)
            w.forget_name()  # any reply means the worker has mapped the current arena
            op = reply["op"]
            if op != "grow":
                break
            try:
                bigger = self._grow(w, int(reply["needed"]), int(reply["minimum"]))
            except OverloadedError as exc:
                w.send({"op": "abort", "message": exc.message})
                return [exc] * len(requests)
            w.send({"op": "arena", "path": str(bigger.path), "size": bigger.size})
        t2 = time.perf_counter_ns()
        if op == "failed":
            error = InternalError(f"Python model '{self._spec.name}' failed: {reply['message']}")
            results: list[Result] = [error] * len(requests)
        elif op == "result":
            results = self._read_outputs(w, reply["responses"])
        else:
            raise InternalError(f"unexpected message '{op}' from the worker of {self._label}")
        t3 = time.perf_counter_ns()
        times.input_ns += t1 - t0
        times.infer_ns += t2 - t1
        times.output_ns += t3 - t2
        return results

    def _grow(self, w: _Worker, needed: int, minimum: int | None = None) -> shm.Arena:
        """A bigger arena: room for ``needed`` bytes if allowed, else for ``minimum``."""
        assert w.arena is not None
        policy = self._model.settings.policy
        try:
            size = policy.next_size(w.arena.size, needed)
        except OverloadedError:
            if minimum is None or minimum >= needed:
                raise
            size = policy.next_size(w.arena.size, minimum)
        bigger = shm.Arena.create(size, tag=self._model.arena_tag(self._group, self._index))
        log.info(
            "shared-memory arena of %s grows from %s to %s",
            self._label,
            shm.human_bytes(w.arena.size),
            shm.human_bytes(size),
        )
        w.arena.close()  # unlinked now; the worker's mapping lives until it switches
        w.arena = bigger
        w.named = True
        return bigger

    @staticmethod
    def _stage(requests: Sequence[InferRequest]) -> list[tuple[shm.Staged, int]]:
        """Inputs in arena order: input by input, each request's tensor after the previous
        request's, so a stackable batch is one contiguous block per input."""
        names: list[str] = []
        for request in requests:
            for name in request.inputs:
                if name not in names:
                    names.append(name)
        staged: list[tuple[shm.Staged, int]] = []
        for name in names:
            for i, request in enumerate(requests):
                array = request.inputs.get(name)
                if array is not None:
                    staged.append((shm.stage(name, array), i))
        return staged

    def _write_inputs(
        self,
        w: _Worker,
        staged: list[tuple[shm.Staged, int]],
        requests: Sequence[InferRequest],
        arena_changed: bool,
    ) -> Message:
        arena = w.arena
        assert arena is not None
        offsets, end = shm.layout(item for item, _ in staged)
        per_request: list[list[Any]] = [[] for _ in requests]
        for (item, owner), offset in zip(staged, offsets, strict=True):
            per_request[owner].append(shm.write(arena, item, offset).to_wire())
        return {
            "op": "execute",
            "arena": [str(arena.path), arena.size] if arena_changed else None,
            "inputs_end": end,
            "requests": [
                {
                    "id": request.id,
                    "parameters_json": encode(request.parameters).decode(),
                    "outputs": self._requested(request),
                    "inputs": refs,
                }
                for request, refs in zip(requests, per_request, strict=True)
            ],
        }

    def _requested(self, request: InferRequest) -> list[str]:
        if request.outputs is None:
            return [t.name for t in self._spec.outputs]
        return [o.name for o in request.outputs]

    def _read_outputs(self, w: _Worker, responses: list[dict[str, Any]]) -> list[Result]:
        arena = w.arena
        assert arena is not None
        results: list[Result] = []
        for response in responses:
            if response["error"] is not None:
                results.append(error_from_wire(response["error"]))
                continue
            outputs: dict[str, np.ndarray[Any, Any]] = {}
            problem: InferdError | None = None
            for item in response["outputs"]:
                ref = shm.TensorRef.from_wire(item)
                tensor = self._spec.output_by_name.get(ref.name)
                if tensor is None:
                    continue  # not an output of the model configuration: dropped
                if tensor.datatype.name != ref.datatype:
                    problem = InternalError(
                        f"Python model '{self._spec.name}' returned output '{ref.name}' as "
                        f"{ref.datatype}, but the model configuration declares "
                        f"{tensor.datatype.config_name}"
                    )
                    break
                outputs[ref.name] = shm.read(arena, ref, copy=True)
            results.append(problem if problem is not None else outputs)
        return results

    # -- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        self._closing = True
        acquired = self._lock.acquire(timeout=FINALIZE_TIMEOUT_S)
        try:
            w, self._worker = self._worker, None
            if w is None:
                return
            if acquired and w.process.is_alive():
                try:
                    w.send({"op": "finalize"})
                    deadline = time.monotonic() + FINALIZE_TIMEOUT_S
                    while (message := w.receive(max(0.0, deadline - time.monotonic()))) is not None:
                        if message["op"] == "bye":
                            break
                except OSError:
                    pass
            w.reap(timeout_s=2.0)
            w.release()
        finally:
            if acquired:
                self._lock.release()


class PythonModel:
    """A loaded version: its settings, and workers launched ahead for every instance."""

    def __init__(self, ctx: LoadContext, settings: PythonSettings, model_file: Path) -> None:
        self.ctx = ctx
        self.spec = ctx.spec
        self.version = ctx.version
        self.settings = settings
        self.model_file = model_file
        self._mp = _context(settings.start_method)
        self._config_json = to_json_dict(ctx.spec.proto) if ctx.spec.proto is not None else {}
        self._launched: dict[tuple[str, int], _Worker] = {}
        self._instances: list[PythonInstance] = []
        self._lock = threading.Lock()

    def arena_tag(self, group: InstanceGroupSpec, index: int) -> str:
        return f"{self.spec.name}-{self.version}-{group.name}-{index}"

    def init_message(self, group: InstanceGroupSpec, index: int) -> dict[str, Any]:
        args = {
            "model_config": json.dumps(self._config_json),
            "model_instance_kind": _KINDS.get(group.kind, "CPU"),
            "model_instance_name": f"{group.name}_{index}",
            "model_instance_device_id": str(group.gpus[0] if group.gpus else 0),
            "model_repository": str(self.ctx.model_dir),
            "model_version": str(self.version),
            "model_name": self.spec.name,
        }
        return {
            "mode": "serve",
            "model_name": self.spec.name,
            "model_file": str(self.model_file),
            "module_tag": re.sub(r"\W", "_", f"{self.spec.name}_{self.version}"),
            "max_batch_size": self.spec.max_batch_size,
            "config": self._config_json,
            "parameters": dict(self.spec.parameters),
            "args": args,
        }

    def launch(self, group: InstanceGroupSpec, index: int) -> _Worker:
        """Start a worker process (returns at once; ``initialize`` runs in the child)."""
        arena = shm.Arena.create(
            self.settings.policy.initial_bytes, tag=self.arena_tag(group, index)
        )
        return _launch(
            self._mp,
            self.init_message(group, index),
            arena,
            f"inferd-python-{self.spec.name}-{index}",
        )

    def launch_all(self) -> None:
        """Start every instance's worker at once, then wait for all to initialise (so they
        initialise in parallel). Raises :class:`ModelLoadError` if one cannot start."""
        try:
            for group in self.spec.instance_groups:
                for index in range(group.count):
                    self._launched[(group.name, index)] = self.launch(group, index)
        except Exception as exc:
            self.close()
            raise ModelLoadError(
                f"failed to load '{self.spec.name}' version {self.version}: cannot start a "
                f"worker process: {exc}"
            ) from exc
        for (_, index), w in list(self._launched.items()):
            reason = _await_ready(w, index)
            if reason is not None:
                self.close()
                raise ModelLoadError(
                    f"failed to load '{self.spec.name}' version {self.version}: {reason}"
                )

    def create_instance(self, group: InstanceGroupSpec, index: int) -> PythonInstance:
        with self._lock:
            launched = self._launched.pop((group.name, index), None)
        instance = PythonInstance(self, group, index)
        instance.start(launched)
        self._instances.append(instance)
        return instance

    def close(self) -> None:
        with self._lock:
            leftovers, self._launched = list(self._launched.values()), {}
        for w in leftovers:
            if w.process.is_alive():
                w.process.kill()
            w.reap()
            w.release()


class PythonBackend:
    name = "python"
    platforms: tuple[str, ...] = ()
    default_model_filename = "model.py"

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        """Run the model's ``auto_complete_config`` (if it has one) in a short-lived worker."""
        if not model_path.is_file():
            return
        if "auto_complete_config" not in model_path.read_text(encoding="utf-8", errors="replace"):
            return
        ctx = _context("forkserver")
        init = {
            "mode": "auto_complete",
            "model_name": config.name or model_path.parent.parent.name,
            "model_file": str(model_path),
            "module_tag": "autocomplete",
            "config": to_json_dict(config),
        }
        w = _launch(ctx, init, None, f"inferd-python-autocomplete-{init['model_name']}")
        try:
            message = w.receive(AUTO_COMPLETE_TIMEOUT_S)
        finally:
            w.reap(timeout_s=5.0)
            w.release()
        if message is None:
            raise ConfigError(
                f"auto_complete_config of {model_path} did not answer (its process exited "
                f"with {describe_exit(w.process.exitcode)} or took over "
                f"{AUTO_COMPLETE_TIMEOUT_S:.0f} s)"
            )
        if message["op"] != "config":
            raise ConfigError(f"auto_complete_config of {model_path} failed: {message['message']}")
        completed = type(config)()
        try:
            json_format.ParseDict(message["config"], completed)
        except json_format.ParseError as exc:
            raise ConfigError(
                f"auto_complete_config of {model_path} produced an invalid configuration: {exc}"
            ) from None
        config.CopyFrom(completed)

    def load(self, ctx: LoadContext) -> PythonModel:
        spec = ctx.spec
        model_file = ctx.model_path
        if not model_file.is_file():
            raise ModelLoadError(
                f"failed to load '{spec.name}' version {ctx.version}: unable to find '{model_file}'"
            )
        model = PythonModel(ctx, parse_settings(spec), model_file)
        model.launch_all()
        return model
