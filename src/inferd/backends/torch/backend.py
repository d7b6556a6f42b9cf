"""The PyTorch backend: ``backend: "pytorch"``, platforms ``pytorch_libtorch`` (TorchScript,
``model.pt``) and ``torch_export`` (``torch.export`` programs, ``model.pt2``).

Each instance owns a module (one per instance unless ``ENABLE_WEIGHT_SHARING``) and runs on its
own worker thread; torch releases the GIL inside its operators, so instances compute in
parallel. Inputs enter torch without copies (``torch.from_numpy``) and outputs leave the same
way (``Tensor.numpy()``). Requests that stack are run as one batch; what a failed batch answers
is decided by :mod:`inferd.backends.execution`, as for every runtime. Thread settings: see
:mod:`inferd.backends.torch.settings`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferd.backends.base import ExecutionTimes, LoadContext, Outputs, Result
from inferd.backends.batching import StackingInstance
from inferd.backends.runtime_errors import Blame, RuntimeFamily, last_line
from inferd.backends.torch.autocomplete import complete_exported
from inferd.backends.torch.settings import TorchSettings, parse_settings
from inferd.backends.torch.tensors import (
    InputBinding,
    OutputBinding,
    Signature,
    bind_inputs,
    bind_outputs,
    check_datatypes,
    select_outputs,
    to_numpy,
    to_torch,
)
from inferd.core.devices import gpu_index, instance_device
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.errors import ConfigError, InternalError, InvalidInputError, ModelLoadError

log = logging.getLogger(__name__)

TORCHSCRIPT = "pytorch_libtorch"
EXPORT = "torch_export"
_EXPORT_FILENAME = "model.pt2"

# Lower-cased fragments of torch messages that blame the inputs rather than the model.
_INPUT_HINTS = (
    "shape",
    "size",
    "dimension",
    "dtype",
    "scalar type",
    "expected",
    "mismatch",
    "must match",
    "guard failed",
    "cannot be multiplied",
    "out of bounds",
    "out of range",
)

_SCRIPTED_INPUT_ERRORS = tuple(
    f"builtins.{name}:" for name in ("TypeError", "ValueError", "IndexError", "AssertionError")
)

Module = Callable[..., Any]


def blame(exc: BaseException) -> Blame:
    """Whether a failure of ``forward`` is the request's or the model's.

    Python's own argument errors are the request's, also when TorchScript code raised them (they
    reach Python as ``torch.jit.Error`` "builtins.<Class>: ..."); so are torch's RuntimeErrors
    that speak of the tensors' shapes, sizes or types. Anything else is the model's."""
    if isinstance(exc, TypeError | ValueError | IndexError | AssertionError):
        return Blame.REQUEST
    if last_line(exc).startswith(_SCRIPTED_INPUT_ERRORS):
        return Blame.REQUEST
    if isinstance(exc, RuntimeError | torch.jit.Error):
        text = str(exc).lower()
        if any(hint in text for hint in _INPUT_HINTS):
            return Blame.REQUEST
    return Blame.MODEL


FAMILY = RuntimeFamily("torch", blame)


def _format(spec: ModelSpec, path: Path) -> str:
    platform = spec.platform
    if not platform:
        return EXPORT if path.suffix == ".pt2" else TORCHSCRIPT
    if platform not in (TORCHSCRIPT, EXPORT):
        raise ModelLoadError(
            f"failed to load '{spec.name}': the pytorch backend serves platforms "
            f"'{TORCHSCRIPT}' (TorchScript) and '{EXPORT}' (torch.export), not '{platform}'"
        )
    return platform


def resolve_model_path(platform: str, path: Path) -> Path:
    """``model.pt2`` for an exported program whose config left the file name at ``model.pt``."""
    if platform == EXPORT and path.name == "model.pt" and not path.exists():
        candidate = path.with_name(_EXPORT_FILENAME)
        if candidate.exists():
            return candidate
    return path


def _device(spec: ModelSpec, group: InstanceGroupSpec, index: int) -> torch.device:
    """Instance ``index``'s device (:func:`inferd.core.devices.instance_device`), checked."""
    name = instance_device(group.kind, group.count, group.gpus, index)
    gpu = gpu_index(name)
    if gpu is None:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ModelLoadError(
            f"failed to load '{spec.name}': instance group '{group.name}' requests KIND_GPU but "
            "torch sees no CUDA device (a CPU-only torch build, or no GPU on this machine)"
        )
    if gpu >= torch.cuda.device_count():
        raise ModelLoadError(
            f"failed to load '{spec.name}': instance group '{group.name}' names GPU {gpu} but "
            f"torch sees {torch.cuda.device_count()} CUDA device(s)"
        )
    return torch.device("cuda", gpu)


def _signature(module: Any, fmt: str) -> Signature | None:
    """``forward``'s arguments as far as they can be read; None when they cannot."""
    try:
        if fmt == TORCHSCRIPT:
            arguments = list(module.forward.schema.arguments)[1:]  # without self
            names = tuple(a.name for a in arguments)
            required = next(
                (i for i, a in enumerate(arguments) if a.has_default_value()), len(arguments)
            )
            return Signature(names, required)
        params = list(inspect.signature(module.forward).parameters.values())
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    variadic = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    required = next(
        (i for i, p in enumerate(positional) if p.default is not inspect.Parameter.empty),
        len(positional),
    )
    return Signature(tuple(p.name for p in positional), required, variadic)


def load_module(ctx: LoadContext, path: Path, fmt: str, device: torch.device) -> Module:
    """Read the model file onto ``device``; :class:`ModelLoadError` if torch cannot."""
    what = "TorchScript" if fmt == TORCHSCRIPT else "a torch.export program"
    try:
        if fmt == TORCHSCRIPT:
            jit_load: Callable[..., Any] = torch.jit.load
            script: Module = jit_load(str(path), map_location=device).eval()
            return script
        program = torch.export.load(str(path))
        if device.type != "cpu":
            from torch.export.passes import move_to_device_pass

            program = move_to_device_pass(program, device)
        module: Module = program.module()
        return module
    except Exception as exc:
        hint = (
            " (model.pt must be saved with torch.jit.save; state dicts and pickled modules are "
            "not served)"
            if fmt == TORCHSCRIPT
            else " (model.pt2 must be saved with torch.export.save; AOTInductor packages are not "
            "served)"
        )
        raise ModelLoadError(
            f"failed to load '{ctx.spec.name}' version {ctx.version}: torch could not load "
            f"{what} from {path}: {last_line(exc)}{hint}"
        ) from exc


class TorchInstance(StackingInstance[list[torch.Tensor | None]]):
    """One module on one device; ``execute`` runs on the instance's worker thread."""

    def __init__(
        self,
        spec: ModelSpec,
        module: Module,
        device: torch.device,
        settings: TorchSettings,
        inputs: tuple[InputBinding, ...],
        outputs: tuple[OutputBinding, ...],
    ) -> None:
        self._spec = spec
        self._module: Module | None = module
        self._device = device
        self._settings = settings
        self._inputs = {b.tensor.name: b for b in inputs}
        self._arity = len(inputs)
        self._outputs = outputs
        self._output_specs = {b.tensor.name: b.tensor for b in outputs}
        self._output_names = [b.tensor.name for b in outputs]
        self._batched = spec.max_batch_size > 0
        self._thread: int | None = None
        # each GPU instance computes on a stream of its own: instances sharing a GPU overlap
        self._stream: Any = None
        if device.type == "cuda":
            self._stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]

    @property
    def device(self) -> torch.device:
        return self._device

    def execute_timed(
        self, requests: Sequence[InferRequest], times: ExecutionTimes
    ) -> list[Result]:
        """Run the requests as one batch when they stack; each alone otherwise."""
        self._prepare_thread()
        return super().execute_timed(requests, times)

    def _prepare_thread(self) -> None:
        """Apply the model's thread settings in the calling thread (once per thread)."""
        ident = threading.get_ident()
        if self._thread != ident:
            if self._settings.intra_op_threads > 0:
                torch.set_num_threads(self._settings.intra_op_threads)
            # TorchScript's executor optimisation flag is per thread in torch
            torch._C._set_graph_executor_optimize(self._settings.optimized_execution)
            self._thread = ident

    def _modes(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        if self._settings.inference_mode:
            stack.enter_context(torch.inference_mode())
        else:
            stack.enter_context(torch.no_grad())
        return stack

    def _feeds(self, inputs: dict[str, np.ndarray[Any, Any]]) -> list[torch.Tensor | None]:
        """``forward``'s positional arguments (absent optional ones at the end left out)."""
        args: list[torch.Tensor | None] = [None] * self._arity
        for input_name, array in inputs.items():
            binding = self._inputs.get(input_name)
            if binding is None:
                raise InvalidInputError(
                    f"unexpected inference input '{input_name}' for '{self._spec.name}'"
                )
            args[binding.position] = to_torch(array, binding.tensor, self._batched)
        while args and args[-1] is None:  # absent optional inputs at the end: use defaults
            args.pop()
        return args

    def _on_stream(self) -> contextlib.AbstractContextManager[Any]:
        if self._stream is None:
            return contextlib.nullcontext()
        return torch.cuda.stream(self._stream)

    def _on_device(self, feeds: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        """The batch's tensors copied to the instance's GPU, once per batch (pinned first, so
        that the copy is a DMA the stream orders; outputs come back by ``to_numpy``)."""
        return [
            None if t is None else t.pin_memory().to(self._device, non_blocking=True) for t in feeds
        ]

    def run(self, feeds: list[torch.Tensor | None], output_names: list[str]) -> Outputs:
        """Run one (possibly stacked) batch and return the outputs the configuration gives."""
        module = self._module
        if module is None:
            raise InternalError(f"an instance of model '{self._spec.name}' was used after close")
        name = self._spec.name
        try:
            with self._modes(), self._on_stream():
                if self._stream is not None:
                    feeds = self._on_device(feeds)
                result = module(*feeds)
                chosen = select_outputs(result, self._outputs, output_names, name)
                # on the instance's stream: the copies back wait for its computation
                return {
                    out: to_numpy(value, self._output_specs[out], self._batched, name)
                    for out, value in chosen.items()
                }
        except Exception as exc:  # translated once, here, at the runtime boundary
            raise FAMILY.translate(exc, name) from exc
        finally:
            if self._settings.cache_cleaning and self._device.type == "cuda":
                torch.cuda.empty_cache()

    def close(self) -> None:
        self._module = None


class TorchModel:
    """A loaded model version: knows how to place a module on a device for each instance."""

    def __init__(
        self,
        ctx: LoadContext,
        settings: TorchSettings,
        path: Path,
        fmt: str,
        first: Module,
    ) -> None:
        self._ctx = ctx
        self._settings = settings
        self._path = path
        self._format = fmt
        self._lock = threading.Lock()
        self._spare: Module | None = first  # loaded on the CPU by TorchBackend.load
        self._shared: dict[torch.device, Module] = {}
        signature = _signature(first, fmt)
        self.inputs = bind_inputs(ctx.spec, signature)
        self.outputs = bind_outputs(ctx.spec)

    @property
    def format(self) -> str:
        return self._format

    def _module_for(self, device: torch.device) -> Module:
        with self._lock:
            if self._settings.weight_sharing and device in self._shared:
                return self._shared[device]
            module = self._spare if device.type == "cpu" else None
            self._spare = None
        if module is None:
            module = load_module(self._ctx, self._path, self._format, device)
        if self._settings.weight_sharing:
            with self._lock:
                module = self._shared.setdefault(device, module)
        return module

    def create_instance(self, group: InstanceGroupSpec, index: int) -> TorchInstance:
        spec = self._ctx.spec
        device = _device(spec, group, index)
        return TorchInstance(
            spec, self._module_for(device), device, self._settings, self.inputs, self.outputs
        )

    def close(self) -> None:
        with self._lock:
            self._spare = None
            self._shared.clear()


def _apply_inter_op(settings: TorchSettings, spec: ModelSpec) -> None:
    wanted = settings.inter_op_threads
    if wanted == 0 or torch.get_num_interop_threads() == wanted:
        return
    try:
        torch.set_num_interop_threads(wanted)
    except RuntimeError:
        raise ConfigError(
            f"parameter 'INTER_OP_THREAD_COUNT' asks for {wanted} inter-op threads but torch's "
            f"process-wide inter-op pool already runs {torch.get_num_interop_threads()}; it can "
            "be sized only once, before any model runs"
        ) from None


class TorchBackend:
    """``backend: "pytorch"``: TorchScript and ``torch.export`` models."""

    name = "pytorch"
    platforms: tuple[str, ...] = (TORCHSCRIPT, EXPORT)
    default_model_filename = "model.pt"

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        """Exported programs are completed from their signature; TorchScript needs a config."""
        if len(config.input) > 0 and len(config.output) > 0:
            return
        platform = config.platform or (EXPORT if model_path.suffix == ".pt2" else TORCHSCRIPT)
        if platform == EXPORT:
            complete_exported(
                config,
                resolve_model_path(platform, model_path),
                default_max_batch_size=default_max_batch_size,
            )
            return
        name = config.name or model_path.parent.parent.name
        raise ConfigError(
            f"model '{name}': a TorchScript model's configuration must list every input and "
            "output (TorchScript files carry no signature to complete it from); add them to "
            "config.pbtxt named INPUT__0, INPUT__1, ... and OUTPUT__0, ... (or after forward()'s "
            "arguments) with their data_type and dims"
        )

    def load(self, ctx: LoadContext) -> TorchModel:
        spec = ctx.spec
        if not spec.inputs or not spec.outputs:
            raise ConfigError(
                f"model '{spec.name}' has no {'inputs' if not spec.inputs else 'outputs'} in its "
                "configuration; the pytorch backend needs every input and output listed "
                "(INPUT__0, ... / OUTPUT__0, ...)"
            )
        check_datatypes(spec)
        settings = parse_settings(spec)
        fmt = _format(spec, ctx.model_path)
        path = resolve_model_path(fmt, ctx.model_path)
        if not path.is_file():
            raise ModelLoadError(
                f"failed to load '{spec.name}' version {ctx.version}: unable to find '{path}'"
            )
        _apply_inter_op(settings, spec)
        log.info(
            "model '%s' version %s: pytorch %s intra-op thread(s) per instance, inter-op %s",
            spec.name,
            ctx.version,
            settings.intra_op_threads or f"torch's default ({torch.get_num_threads()})",
            settings.inter_op_threads or "torch's default",
        )
        first = load_module(ctx, path, fmt, torch.device("cpu"))
        return TorchModel(ctx, settings, path, fmt, first)
