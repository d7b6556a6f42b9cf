"""ONNX Runtime backend: ``backend: "onnxruntime"`` / ``platform: "onnxruntime_onnx"``.

One ``InferenceSession`` per instance (ONNX Runtime releases the GIL while it runs, so each
instance runs on its own worker thread). Session options come from the config ``parameters``
with the keys Triton's ONNX Runtime backend reads; values it cannot honour are rejected.

Thread layout when the config sets no ``intra_op_thread_count``: the instances share the cores
(two instances on two cores get one intra-op thread each, the best layout under load), and the
model also gets one *solo* session with a thread per core, which an instance uses for a batch
it starts while no other instance of the model is running one: a lone request gets every core,
concurrent ones get one core each (see :class:`SoloSession`). No session's threads spin after
a run unless the config sets ``allow_spinning`` (see :mod:`inferd.backends.ort_sessions`); a key
that misspells one of this backend's is refused with the key it meant.
"""

from __future__ import annotations

import difflib
import functools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from google.protobuf.message import DecodeError

from inferd.backends import ort_providers, shapes
from inferd.backends.autofill import add_tensors, apply_batching
from inferd.backends.base import LoadContext, Outputs
from inferd.backends.batching import StackingInstance
from inferd.backends.model_io import ModelTensor, check_io
from inferd.backends.ort_sessions import (
    GRAPH_LEVELS,
    INTER_SPINNING,
    INTRA_SPINNING,
    SessionSettings,
    SoloSession,
)
from inferd.backends.ort_weights import NotShareable, SharedWeights
from inferd.backends.parameters import bool_param, int_param
from inferd.backends.runtime_errors import Blame, RuntimeFamily
from inferd.backends.threads import available_cores, default_intra_op_threads
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec, TensorSpec
from inferd.errors import (
    ConfigError,
    InternalError,
    InvalidInputError,
    ModelLoadError,
)

log = logging.getLogger(__name__)

_CPU = ort_providers.CPU

# ONNX Runtime type strings -> model config data types.
_ORT_TO_CONFIG = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(bfloat16)": "TYPE_BF16",
    "tensor(string)": "TYPE_STRING",
}

# ONNX Runtime's status classes (one per status code) that blame the request. INVALID_ARGUMENT
# is ORT's own verdict on the feeds (type, rank, dims, names) and on values some kernels check
# (Gather indices). FAIL and RUNTIME_EXCEPTION blame the request only when a kernel raised them
# while running a node (see _KERNEL_FAILURE): the graph was checked when the session was built and
# the config was checked against it, so a kernel that fails at run time failed on the values it
# was fed (a string Cast that does not parse, an index out of range, a reshape the values make
# impossible). Every other status (EP_FAIL, ENGINE_ERROR, NOT_IMPLEMENTED, ...) blames the model
# or the runtime.
_ORT_STATE = ort.capi.onnxruntime_pybind11_state
_REQUEST_STATUSES: tuple[type[Exception], ...] = (_ORT_STATE.InvalidArgument, ValueError, TypeError)
_KERNEL_STATUSES: tuple[type[Exception], ...] = (_ORT_STATE.Fail, _ORT_STATE.RuntimeException)
# How ONNX Runtime's executor wraps the status a kernel returned.
_KERNEL_FAILURE = "Non-zero status code returned while running "


#: the run option set under a memory budget: the CPU arena gives back, after each run, what the
#: run grew it by (``parse_settings``)
BOUNDED_SHRINKAGE = "cpu:0"

# -- settings -----------------------------------------------------------------------------------


def parse_settings(
    spec: ModelSpec, cores: int | None = None, *, bounded_memory: bool = False
) -> SessionSettings:
    """Read the session settings from the config; raise :class:`ConfigError` on a bad value.

    ``cores`` (default: the cores this process may use) sizes the default thread layout.
    ``bounded_memory`` (the server holds a memory budget): unless the config says otherwise,
    the CPU memory arena shrinks back after each run. ONNX Runtime's arena otherwise keeps the
    largest batch's activations for good: a MiniLM session measured at 90 MiB after its load
    held 616 MiB after batches of up to 64 texts of 128 tokens
    (``bench/ort_arena_shrinkage.py``), memory the budget would count as nobody's.
    """
    params = spec.parameters
    execution_mode = _int_param(params, "execution_mode", 0, minimum=0)
    if execution_mode not in (0, 1):
        raise ConfigError(
            f"parameter 'execution_mode' must be 0 (sequential) or 1 (parallel), "
            f"got '{params['execution_mode']}'"
        )
    graph_level = spec.optimization.graph_level or 0
    if graph_level not in GRAPH_LEVELS:
        raise ConfigError(
            f"optimization.graph.level must be -1 (basic), 1 (extended), 2 (disabled) or "
            f"0 (all, the default), got {graph_level}"
        )
    entries: list[tuple[str, str]] = []
    device_alloc = _bool_param(params, "session.use_device_allocator_for_initializers")
    if device_alloc is not None:
        entries.append(("session.use_device_allocator_for_initializers", str(int(device_alloc))))
    run_entries: list[tuple[str, str]] = []
    shrinkage = params.get("memory.enable_memory_arena_shrinkage")
    arena = _bool_param(params, "enable_mem_arena")
    if shrinkage is None and bounded_memory and arena is not False:
        shrinkage = BOUNDED_SHRINKAGE
    if shrinkage is not None:
        run_entries.append(("memory.enable_memory_arena_shrinkage", shrinkage))
    _check_near_misses(params)
    intra_spinning, inter_spinning = _spinning(params)
    available = cores if cores is not None else available_cores()
    shared = default_intra_op_threads(spec, available)
    explicit = "intra_op_thread_count" in params
    return SessionSettings(
        intra_op_threads=_int_param(params, "intra_op_thread_count", shared, minimum=0),
        solo_threads=0 if explicit or not _wants_solo(spec, shared, available) else available,
        inter_op_threads=_int_param(params, "inter_op_thread_count", 0, minimum=0),
        parallel_execution=execution_mode == 1,
        graph_level=graph_level,
        enable_mem_arena=arena,
        enable_mem_pattern=_bool_param(params, "enable_mem_pattern"),
        intra_spinning=intra_spinning,
        inter_spinning=inter_spinning,
        cores=available,
        explicit_threads=explicit,
        config_entries=tuple(entries),
        run_config_entries=tuple(run_entries),
        share_weights=_bool_param(params, "share_weights"),
    )


# The keys this backend reads (Triton's, plus ``allow_spinning`` and ONNX Runtime's own names
# of the spinning entries), and the names ONNX Runtime's Python API gives some of them.
_KNOWN = (
    "intra_op_thread_count",
    "inter_op_thread_count",
    "execution_mode",
    "enable_mem_arena",
    "enable_mem_pattern",
    "allow_spinning",
    INTRA_SPINNING,
    INTER_SPINNING,
    "session.use_device_allocator_for_initializers",
    "memory.enable_memory_arena_shrinkage",
    "share_weights",
)
_ORT_NAMES = {
    "intra_op_num_threads": "intra_op_thread_count",
    "inter_op_num_threads": "inter_op_thread_count",
    "enable_cpu_mem_arena": "enable_mem_arena",
    "graph_optimization_level": "optimization { graph { level } }",
}


def _check_near_misses(params: dict[str, str]) -> None:
    """Refuse a key that is a misspelling of one this backend reads (other keys may belong to
    other parts of inferd, e.g. the embeddings route, and are left to them)."""
    for key in params:
        if key in _KNOWN:
            continue
        meant = _ORT_NAMES.get(key.lower())
        if meant is None:
            close = difflib.get_close_matches(key.lower(), _KNOWN, n=1, cutoff=0.8)
            meant = close[0] if close else None
        if meant is not None:
            raise ConfigError(
                f"unknown parameter '{key}' for backend 'onnxruntime'; did you mean '{meant}'?"
            )


def _spinning(params: dict[str, str]) -> tuple[bool | None, bool | None]:
    """Whether the intra-op and inter-op threads spin, as the config says (None: it does not):
    ``allow_spinning`` sets both, ONNX Runtime's own keys one each."""
    both = _bool_param(params, "allow_spinning")
    found: list[bool | None] = []
    for key in (INTRA_SPINNING, INTER_SPINNING):
        value = _bool_param(params, key)
        if value is not None and both is not None and value != both:
            raise ConfigError(
                f"parameter '{key}' is '{params[key]}' but 'allow_spinning' is "
                f"'{params['allow_spinning']}'; set one of them"
            )
        found.append(both if value is None else value)
    return found[0], found[1]


def _wants_solo(spec: ModelSpec, shared: int, cores: int) -> bool:
    """A solo session pays when the default layout gives each CPU instance fewer than all the
    cores (several instances); GPU instances compute on the device and get none."""
    cpu_only = all(group.kind == "KIND_CPU" for group in spec.instance_groups)
    return cpu_only and bool(spec.instance_groups) and shared < cores


# -- auto-complete ------------------------------------------------------------------------------


def _onnx_dims(shape: Sequence[Any]) -> list[int]:
    """ONNX Runtime reports symbolic or unknown dimensions as str / None: both become -1."""
    return [d if isinstance(d, int) and d >= 0 else -1 for d in shape]


def _config_type(ort_type: str, tensor_name: str) -> str:
    found = _ORT_TO_CONFIG.get(ort_type)
    if found is None:
        raise ConfigError(
            f"unable to auto-complete tensor '{tensor_name}': ONNX type {ort_type} has no "
            "model config data type"
        )
    return found


# What to tell the owner of a scikit-learn classifier exported with skl2onnx's defaults, whose
# probabilities come out of a ZipMap as a sequence of maps rather than a tensor.
NON_TENSOR_HINT = (
    "a scikit-learn classifier exported by skl2onnx gives its probabilities as a sequence of "
    "maps (ZipMap) unless exported with options={id(model): {'zipmap': False}} (or "
    "{type(model): {'zipmap': False}}), which makes them a tensor"
)


def _is_tensor(ort_type: str) -> bool:
    return ort_type.startswith("tensor(")


def _tensor_outputs(outputs: Sequence[Any], where: str) -> list[Any]:
    """The outputs that are tensors; the others (sequences, maps) are left out with a warning."""
    served = [a for a in outputs if _is_tensor(a.type)]
    skipped = [a for a in outputs if not _is_tensor(a.type)]
    for arg in skipped:
        log.warning(
            "%s: output '%s' is a %s, not a tensor, and is not served (%s)",
            where,
            arg.name,
            arg.type,
            NON_TENSOR_HINT,
        )
    if not served:
        raise ConfigError(
            f"unable to auto-complete {where}: none of its outputs is a tensor "
            f"({', '.join(f'{a.name}: {a.type}' for a in skipped)}); {NON_TENSOR_HINT}"
        )
    return served


def _model_tensors(args: Sequence[Any]) -> list[tuple[str, str, list[int]]]:
    return [(a.name, _config_type(a.type, a.name), _onnx_dims(a.shape)) for a in args]


# -- tensor adaptation --------------------------------------------------------------------------


def _to_ort_strings(name: str, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    flat = array.ravel()
    out = np.empty(flat.shape, dtype=object)
    for i, item in enumerate(flat):
        if isinstance(item, bytes | bytearray | memoryview):
            try:
                out[i] = bytes(item).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidInputError(
                    f"input '{name}' element {i} is not valid UTF-8, which ONNX Runtime string "
                    f"tensors require: {exc.reason} at byte {exc.start}"
                ) from None
        else:
            out[i] = str(item)
    return out.reshape(array.shape)


def _from_ort_strings(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    flat = array.ravel()
    out = np.empty(flat.shape, dtype=object)
    for i, item in enumerate(flat):
        out[i] = item.encode("utf-8") if isinstance(item, str) else bytes(item)
    return out.reshape(array.shape)


@dataclass(frozen=True, slots=True)
class _Plan:
    """How one tensor moves between the request (config dims) and the model (ONNX shape)."""

    tensor: TensorSpec
    model_rank: int | None  # ONNX rank, None if unknown

    def request_to_model(self, array: np.ndarray[Any, Any], batched: bool) -> np.ndarray[Any, Any]:
        array = shapes.to_model(array, self.tensor, batched, self.model_rank)
        if self.tensor.datatype.is_bytes:
            array = _to_ort_strings(self.tensor.name, array)
        return array

    def model_to_response(
        self, array: np.ndarray[Any, Any], batched: bool, model: str
    ) -> np.ndarray[Any, Any]:
        if self.tensor.datatype.is_bytes:
            array = _from_ort_strings(array)
        return shapes.to_config(array, self.tensor, batched, model)


def blame(exc: BaseException) -> Blame:
    """Whether a failure of ``InferenceSession.run`` is the request's or the model's."""
    if isinstance(exc, _REQUEST_STATUSES):
        return Blame.REQUEST
    if isinstance(exc, _KERNEL_STATUSES) and _KERNEL_FAILURE in str(exc):
        return Blame.REQUEST
    return Blame.MODEL


FAMILY = RuntimeFamily("onnxruntime", blame, summary=lambda exc: str(exc).strip())


# -- the protocols ------------------------------------------------------------------------------


class OnnxRuntimeInstance(StackingInstance[dict[str, np.ndarray[Any, Any]]]):
    """One session; ``execute`` runs on the instance's worker thread."""

    def __init__(
        self,
        spec: ModelSpec,
        session: ort.InferenceSession,
        run_options: ort.RunOptions,
        solo: SoloSession | None = None,
    ) -> None:
        self._spec = spec
        self._session: ort.InferenceSession | None = session
        self._run_options = run_options
        self._solo = solo
        ranks = {a.name: len(a.shape) for a in session.get_inputs()}
        out_ranks = {a.name: len(a.shape) for a in session.get_outputs()}
        self._inputs = {t.name: _Plan(t, ranks.get(t.name)) for t in spec.inputs}
        self._outputs = {t.name: _Plan(t, out_ranks.get(t.name)) for t in spec.outputs}
        self._output_names = list(self._outputs)
        self._batched = spec.max_batch_size > 0

    @property
    def session(self) -> ort.InferenceSession:
        return self._session

    def _feeds(self, inputs: dict[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        feeds: dict[str, np.ndarray[Any, Any]] = {}
        for name, array in inputs.items():
            plan = self._inputs.get(name)
            if plan is None:
                raise InvalidInputError(
                    f"unexpected inference input '{name}' for model '{self._spec.name}'"
                )
            feeds[name] = plan.request_to_model(array, self._batched)
        return feeds

    def run(self, feeds: dict[str, np.ndarray[Any, Any]], output_names: list[str]) -> Outputs:
        """Run one (possibly concatenated) batch and return outputs shaped as the config says."""
        if not output_names:
            return {}
        session = self._session
        if session is None:
            raise InternalError(f"an instance of model '{self._spec.name}' was used after close")
        solo = self._solo
        try:
            if solo is None:
                produced = session.run(output_names, feeds, self._run_options)
            else:
                wide = solo.enter()
                try:
                    chosen = session if wide is None else wide
                    produced = chosen.run(output_names, feeds, self._run_options)
                finally:
                    solo.leave()
        except Exception as exc:  # translated once, here, at the runtime boundary
            raise FAMILY.translate(exc, self._spec.name) from exc
        return {
            name: self._outputs[name].model_to_response(
                np.asarray(array), self._batched, self._spec.name
            )
            for name, array in zip(output_names, produced, strict=True)
        }

    def close(self) -> None:
        self._session = None
        self._solo = None


class OnnxRuntimeModel:
    """A loaded model version; builds one session per instance."""

    def __init__(self, ctx: LoadContext, settings: SessionSettings, path: Path) -> None:
        self._ctx = ctx
        self._settings = settings
        self._path = path
        self._spare: tuple[list[Any], ort.InferenceSession] | None = None
        self._lock = threading.Lock()
        self.solo: SoloSession | None = None
        self.accelerators = ort_providers.parse_accelerators(ctx.spec)
        ort_providers.check_available(ctx.spec, self.accelerators, ort.get_available_providers())
        self.weights = self._shared_weights()

    def _shared_weights(self) -> SharedWeights | None:
        """One copy of the weights for every session (:mod:`inferd.backends.ort_weights`):
        as the config's ``share_weights`` says, else for two sessions or more, all on the host."""
        wanted = self._settings.share_weights
        if wanted is None:
            groups = self._ctx.spec.instance_groups
            sessions = sum(g.count for g in groups) + (self._settings.solo_threads > 0)
            on_host = all(
                self.providers(g, i) == [ort_providers.CPU] for g in groups for i in range(g.count)
            )
            wanted = sessions >= 2 and on_host
        if not wanted:
            return None
        try:
            return SharedWeights(self._path)
        except (NotShareable, OSError, DecodeError) as exc:  # each session reads the file
            log.debug("model '%s': weights not shared: %s", self._ctx.spec.name, exc)
            return None

    def providers(self, group: InstanceGroupSpec, index: int) -> list[Any]:
        return ort_providers.providers(
            self._ctx.spec, group, index, self.accelerators, ort.get_available_providers()
        )

    def build_session(
        self,
        group: InstanceGroupSpec,
        intra_op_threads: int | None = None,
        *,
        solo: bool = False,
        index: int = 0,
    ) -> ort.InferenceSession:
        spec = self._ctx.spec
        providers = self.providers(group, index)
        options = functools.partial(self._settings.session_options, intra_op_threads, solo=solo)
        try:
            if self.weights is None:
                return ort.InferenceSession(str(self._path), options(), providers=providers)
            return self.weights.session(options, providers, self._settings.graph_level)
        except Exception as exc:
            raise ModelLoadError(
                f"failed to load '{spec.name}' version {self._ctx.version}: onnxruntime could "
                f"not create a session from {self._path}: {exc}"
            ) from exc

    def keep_spare(self, group: InstanceGroupSpec, session: ort.InferenceSession) -> None:
        self._spare = (self.providers(group, 0), session)

    def create_instance(self, group: InstanceGroupSpec, index: int) -> OnnxRuntimeInstance:
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None and spare[0] == self.providers(group, index):
            session = spare[1]  # built for the same providers on the same device
        else:
            session = self.build_session(group, index=index)
        return OnnxRuntimeInstance(self._ctx.spec, session, self._settings.run_options(), self.solo)

    def close(self) -> None:
        self._spare = None
        self.solo = None
        self.weights = None


def _model_tensor(arg: Any, kind: str) -> ModelTensor:
    refusal = ""
    if not _is_tensor(arg.type):
        refusal = (
            f"is a {arg.type} in the model, not a tensor, and cannot be served; remove it from "
            "the model configuration" + (f" ({NON_TENSOR_HINT})" if kind == "output" else "")
        )
    shape = None if arg.shape is None else tuple(_onnx_dims(arg.shape))
    return ModelTensor(_ORT_TO_CONFIG.get(arg.type, arg.type), shape, refusal)


def _check_io(spec: ModelSpec, session: ort.InferenceSession) -> None:
    """Config inputs/outputs must exist in the model with the same data types and ranks."""
    check_io(
        spec,
        {a.name: _model_tensor(a, "input") for a in session.get_inputs()},
        {a.name: _model_tensor(a, "output") for a in session.get_outputs()},
    )


class OnnxRuntimeBackend:
    name = "onnxruntime"
    platforms: tuple[str, ...] = ("onnxruntime_onnx",)
    default_model_filename = "model.onnx"

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        """PROTOCOL.md §5.7: batching and input/output lists from the ONNX graph."""
        if len(config.input) > 0 and len(config.output) > 0:
            log.debug("skipping model configuration auto-complete for '%s'", config.name)
            return
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = 1
        try:
            session = ort.InferenceSession(str(model_path), sess_options=options, providers=[_CPU])
        except Exception as exc:
            raise ConfigError(
                f"unable to auto-complete the configuration from {model_path}: {exc}"
            ) from exc
        where = f"model '{config.name or model_path.parent.parent.name}'"
        inputs = session.get_inputs()
        outputs = _tensor_outputs(session.get_outputs(), where)
        untensored = [a for a in inputs if not _is_tensor(a.type)]
        if untensored:
            raise ConfigError(
                f"unable to auto-complete {where}: input '{untensored[0].name}' is a "
                f"{untensored[0].type}, not a tensor; inferd serves tensor inputs only"
            )
        can_batch = all(
            len(arg.shape) >= 1 and _onnx_dims(arg.shape)[0] == -1 for arg in (*inputs, *outputs)
        )
        batching = apply_batching(
            config,
            can_batch=can_batch,
            default_max_batch_size=default_max_batch_size,
            where=where,
        )
        if len(config.input) == 0:
            add_tensors(config.input, _model_tensors(inputs), batching)
        if len(config.output) == 0:
            add_tensors(config.output, _model_tensors(outputs), batching)

    def load(self, ctx: LoadContext) -> OnnxRuntimeModel:
        spec = ctx.spec
        path = ctx.model_path
        if not path.is_file():
            raise ModelLoadError(
                f"failed to load '{spec.name}' version {ctx.version}: unable to find '{path}'"
            )
        settings = parse_settings(spec, bounded_memory=ctx.bounded_memory)
        model = OnnxRuntimeModel(ctx, settings, path)
        first_group = (
            spec.instance_groups[0]
            if spec.instance_groups
            else InstanceGroupSpec(name=spec.name, kind="KIND_CPU", count=1)
        )
        solo = settings.solo_threads > 0
        session = model.build_session(
            first_group, settings.solo_threads if solo else None, solo=solo
        )
        try:
            _check_io(spec, session)
        except ConfigError as exc:
            raise ModelLoadError(
                f"failed to load '{spec.name}' version {ctx.version}: {exc}"
            ) from exc
        if solo:
            model.solo = SoloSession(session)
        else:
            model.keep_spare(first_group, session)
        log.info(
            "model '%s' version %s: onnxruntime %s",
            spec.name,
            ctx.version,
            settings.describe(sum(g.count for g in spec.instance_groups) or 1),
        )
        return model


def _int_param(params: dict[str, str], key: str, default: int, *, minimum: int) -> int:
    value = int_param(params, key, default, minimum=minimum)
    assert value is not None
    return value


def _bool_param(params: dict[str, str], key: str) -> bool | None:
    return bool_param(params, key, expected="a boolean (1/0, true/false)")
