"""Python backend: ``backend: "python"`` with a ``model.py`` per version.

Python code holds the GIL, so each instance of a Python model runs in its own worker process
(``worker.py``), started when the model loads by our own launcher (``launcher.py``: forked from
a preloaded zygote, or spawned), never by multiprocessing, so the server's ``__main__`` is never
re-imported. Each instance moves tensors through its shared-memory arena (``shm.py``,
``transfer.py``); the server-side instance is in ``instance.py``.

Config ``parameters`` read by the backend (all optional; the model sees every parameter too):

``shm-default-byte-size``  first size of each instance's arena (default 16 MiB)
``shm-max-byte-size``      cap on an arena's growth (default: half the free space of /dev/shm)
``worker-start-method``    ``zygote`` (default; ``forkserver`` is accepted as its old name) or
                           ``spawn`` (a fresh interpreter per worker: slower, nothing shared)
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from inferd.backends.base import LoadContext
from inferd.backends.parameters import int_param
from inferd.backends.python import shm
from inferd.backends.python.server.instance import PythonInstance
from inferd.backends.python.server.launcher import (
    ALIASES,
    START_METHODS,
    Launcher,
    ZygoteHost,
    describe_exit,
)
from inferd.backends.python.server.worker_handle import WorkerHandle, await_ready, launch
from inferd.codecs.model_config import to_json_dict
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.errors import ConfigError, ModelLoadError

#: How long ``auto_complete_config`` may take.
AUTO_COMPLETE_TIMEOUT_S = 120.0

_KINDS = {"KIND_CPU": "CPU", "KIND_GPU": "GPU", "KIND_MODEL": "MODEL", "KIND_AUTO": "CPU"}


# -- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PythonSettings:
    start_method: str = "zygote"
    policy: shm.ArenaPolicy = field(default_factory=shm.ArenaPolicy)


def _size_param(params: dict[str, str], key: str, default: int, minimum: int) -> int:
    size = int_param(params, key, default, minimum=minimum, expected="a number of bytes")
    assert size is not None
    return size


def parse_settings(spec: ModelSpec) -> PythonSettings:
    params = spec.parameters
    raw = params.get("worker-start-method", "zygote").strip()
    method = ALIASES.get(raw, raw)
    if method not in START_METHODS:
        raise ConfigError(
            f"parameter 'worker-start-method' must be one of {', '.join(START_METHODS)}, "
            f"got '{raw}'"
        )
    initial = _size_param(params, "shm-default-byte-size", shm.DEFAULT_INITIAL_BYTES, 4096)
    cap = _size_param(params, "shm-max-byte-size", 0, 0)
    if cap and cap < initial:
        raise ConfigError(
            f"parameter 'shm-max-byte-size' ({cap}) is smaller than 'shm-default-byte-size' "
            f"({initial})"
        )
    return PythonSettings(method, shm.ArenaPolicy(initial_bytes=initial, max_bytes=cap))


# -- the protocols -------------------------------------------------------------------------------


class PythonModel:
    """A loaded version: its settings, and workers launched ahead for every instance."""

    def __init__(
        self, ctx: LoadContext, settings: PythonSettings, model_file: Path, host: ZygoteHost
    ) -> None:
        self.ctx = ctx
        self.spec = ctx.spec
        self.version = ctx.version
        self.settings = settings
        self.model_file = model_file
        self._host = host
        self._launcher = Launcher(settings.start_method, host)
        self._config_json = ctx.spec.config
        self._launched: dict[tuple[str, int], WorkerHandle] = {}
        self._lock = threading.Lock()
        self._closed = False
        host.acquire()

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
            "decoupled": self.spec.decoupled,
            "config": self._config_json,
            "parameters": dict(self.spec.parameters),
            "args": args,
        }

    def launch(self, group: InstanceGroupSpec, index: int) -> WorkerHandle:
        """Start a worker process (returns at once; ``initialize`` runs in the child)."""
        arena = shm.Arena.create(
            self.settings.policy.initial_bytes, tag=self.arena_tag(group, index)
        )
        return launch(
            self._launcher,
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
            reason = await_ready(w, index)
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
        return instance

    def close(self) -> None:
        """Stop workers never adopted by an instance; let go of the zygote (the instances are
        closed by their owner before this)."""
        with self._lock:
            leftovers, self._launched = list(self._launched.values()), {}
            closed, self._closed = self._closed, True
        for w in leftovers:
            w.process.kill()
            w.reap()
            w.release()
        if not closed:
            self._host.release()


class PythonBackend:
    name = "python"
    platforms: tuple[str, ...] = ()
    default_model_filename = "model.py"

    def __init__(self) -> None:
        self._zygotes = ZygoteHost()

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        """Run the model's ``auto_complete_config`` (if it has one) in a short-lived worker."""
        if not model_path.is_file():
            return
        if "auto_complete_config" not in model_path.read_text(encoding="utf-8", errors="replace"):
            return
        init = {
            "mode": "auto_complete",
            "model_name": config.name or model_path.parent.parent.name,
            "model_file": str(model_path),
            "module_tag": "autocomplete",
            "config": to_json_dict(config),
        }
        self._zygotes.acquire()
        try:
            launcher = Launcher("zygote", self._zygotes)
            w = launch(launcher, init, None, f"inferd-python-autocomplete-{init['model_name']}")
            try:
                message = w.receive(AUTO_COMPLETE_TIMEOUT_S)
            finally:
                exitcode = w.reap(timeout_s=5.0)
                w.release()
        finally:
            self._zygotes.release()
        if message is None:
            raise ConfigError(
                f"auto_complete_config of {model_path} did not answer (its process exited "
                f"with {describe_exit(exitcode)} or took over "
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
        if not spec.inputs and not spec.outputs:
            raise ConfigError(_no_tensors_message(spec.name, ctx.model_dir, model_file))
        model = PythonModel(ctx, parse_settings(spec), model_file, self._zygotes)
        try:
            model.launch_all()
        except BaseException:
            model.close()
            raise
        return model


def _no_tensors_message(name: str, model_dir: Path, model_file: Path) -> str:
    """Why a Python model that declares no tensor is refused, and what to add."""
    config = model_dir / "config.pbtxt"
    found = (
        f"{config} lists no input or output"
        if config.is_file()
        else f"{model_dir} has no config.pbtxt"
    )
    return (
        f"Python model '{name}' declares no inputs or outputs: {found}, and a model.py does "
        f'not say what it takes and returns. Add {config} with backend: "python", '
        "max_batch_size and its input [ { name, data_type, dims } ] and "
        "output [ { name, data_type, dims } ] entries (the same file serves a model.py written "
        "with Triton's TritonPythonModel or with inferd's typed API, "
        "inferd.backends.python.api.Model), or give TritonPythonModel a static "
        f"auto_complete_config(auto_complete_model_config) that calls add_input and add_output "
        f"(see docs/backends.md); {model_file} was not started"
    )
