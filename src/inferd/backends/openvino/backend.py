"""OpenVINO backend (CPU): ``backend: "openvino"`` for IR (``model.xml`` + ``model.bin``) and ONNX.

The model file decides the format: ``model.xml`` (the default) is OpenVINO IR, while
``default_model_filename: "model.onnx"`` with ``backend: "openvino"`` runs an ONNX file through
OpenVINO instead of ONNX Runtime, so the runtime is chosen per model.

Each instance compiles its own model for the CPU and owns exactly one infer request; OpenVINO
releases the GIL while it computes, so every instance runs on its own worker thread. Compile
options come from the config ``parameters`` with the names Triton's OpenVINO backend reads; a
value that cannot be honoured is rejected at load, never ignored.

OpenVINO does not check what it is fed as strictly as ONNX Runtime does (it converts data types
and may accept a wrong inner dimension), so every input is checked against the compiled model
before it runs.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from openvino import exceptions as ov_exceptions

from inferd.backends import shapes
from inferd.backends.autofill import add_tensors, apply_batching
from inferd.backends.base import LoadContext, Outputs
from inferd.backends.batching import StackingInstance
from inferd.backends.model_io import ModelTensor, check_io
from inferd.backends.openvino.settings import CompileSettings, parse_settings
from inferd.backends.runtime_errors import Blame, RuntimeFamily
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec, TensorSpec
from inferd.errors import (
    ConfigError,
    InternalError,
    InvalidInputError,
    ModelLoadError,
)

log = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]

_DEVICE = "CPU"

# OpenVINO element type names -> model config data types. Strings and bfloat16 are left out on
# purpose: the Python bindings cannot round-trip BYTES faithfully (trailing NULs are lost) and
# have no numpy bfloat16; such models are refused at load with a pointer to ONNX Runtime.
_OV_TO_CONFIG = {
    "boolean": "TYPE_BOOL",
    "u8": "TYPE_UINT8",
    "u16": "TYPE_UINT16",
    "u32": "TYPE_UINT32",
    "u64": "TYPE_UINT64",
    "i8": "TYPE_INT8",
    "i16": "TYPE_INT16",
    "i32": "TYPE_INT32",
    "i64": "TYPE_INT64",
    "f16": "TYPE_FP16",
    "f32": "TYPE_FP32",
    "f64": "TYPE_FP64",
}

# OpenVINO raises a plain RuntimeError for every failure of ``infer``; what tells them apart is the
# frame that failed, which it names in the message. The backend checks names, data types and
# shapes against the compiled model before running (``_InputPlan.to_model``), so what remains for
# the request to cause is a node failing on the values it was fed: the plugin reports it as
# "[<device>] <Op> node with name '<name>'" (a reshape pattern taken from an input, dynamic dims
# that do not broadcast, a TopK k larger than its axis). Python-side conversion errors (TypeError,
# ValueError, OpenVINO's UserInputError / OVTypeError) are the request's too. Anything else (the
# plugin, the device, memory) blames the model or the runtime.
_NODE_FAILURE = re.compile(r"\[[A-Z]+\] (\w+) node with name '([^']*)'")
_REQUEST_EXCEPTIONS: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    ov_exceptions.UserInputError,
    ov_exceptions.OVTypeError,
)


# -- settings -----------------------------------------------------------------------------------


def _type_name(port: Any) -> str:
    name: str = port.get_element_type().get_type_name()
    return name


def _config_type(port: Any) -> str | None:
    return _OV_TO_CONFIG.get(_type_name(port))


def _dims(partial_shape: Any) -> list[int]:
    """A partial shape as config dims: dynamic (or bounded) dimensions become -1."""
    return [d.get_length() if d.is_static else -1 for d in partial_shape]


def _port_name(port: Any, wanted: set[str]) -> str:
    """The name by which the configuration knows a port (OpenVINO ports may have several)."""
    names: set[str] = set(port.get_names())
    for name in sorted(names):
        if name in wanted:
            return name
    any_name: str = port.get_any_name()
    return any_name


def _read_model(core: ov.Core, path: Path) -> ov.Model:
    """Read IR or ONNX; raises ``RuntimeError`` from OpenVINO on a bad file."""
    if path.suffix == ".xml":
        weights = path.with_suffix(".bin")
        if not weights.is_file():
            raise FileNotFoundError(f"the IR weights file '{weights}' next to '{path}' is missing")
        return core.read_model(str(path), str(weights))
    return core.read_model(str(path))


def _model_tensors(ports: Sequence[Any]) -> list[tuple[str, str, list[int]]]:
    tensors = []
    for port in ports:
        config_type = _config_type(port)
        if config_type is None:
            raise ConfigError(
                f"unable to auto-complete tensor '{port.get_any_name()}': OpenVINO element type "
                f"{_type_name(port)} is not supported by the openvino backend"
            )
        tensors.append((port.get_any_name(), config_type, _dims(port.get_partial_shape())))
    return tensors


# -- tensor adaptation --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _InputPlan:
    """How a request tensor becomes a model input, and what the compiled model accepts."""

    tensor: TensorSpec
    port: Any  # the compiled model's input port
    dtype: np.dtype[Any]
    model_rank: int

    def to_model(self, array: Array, batched: bool, model: str, fixed_rows: int = 0) -> Array:
        """Check and adapt one input; ``fixed_rows`` > 0: the batch is padded to it later."""
        if array.dtype != self.dtype:
            raise InvalidInputError(
                f"input '{self.tensor.name}' of model '{model}' has data type {array.dtype}, "
                f"expected {self.dtype}"
            )
        array = shapes.to_model(array, self.tensor, batched, self.model_rank)
        shape = self.port.get_partial_shape()
        given = list(array.shape)
        if fixed_rows and given:
            given[0] = fixed_rows  # the row count is checked when padding
        if not shape.compatible(ov.PartialShape(given)):
            raise InvalidInputError(
                f"input '{self.tensor.name}' of model '{model}' has shape {list(array.shape)}, "
                f"which the model does not accept (expected {shape})"
            )
        return np.ascontiguousarray(array)


@dataclass(frozen=True, slots=True)
class _OutputPlan:
    tensor: TensorSpec
    port: Any

    def to_response(self, array: Array, batched: bool, model: str) -> Array:
        return shapes.to_config(array, self.tensor, batched, model)


def blame(exc: BaseException) -> Blame:
    """Whether a failure of ``InferRequest.infer`` is the request's or the model's."""
    if isinstance(exc, _REQUEST_EXCEPTIONS):
        return Blame.REQUEST
    if isinstance(exc, RuntimeError) and _NODE_FAILURE.search(str(exc)):
        return Blame.REQUEST
    return Blame.MODEL


def summary(exc: BaseException) -> str:
    """OpenVINO's message without its chain of source locations: the node and the last line."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else type(exc).__name__
    node = _NODE_FAILURE.search(text)
    return f"{node.group(1)} node '{node.group(2)}': {last}" if node else last


FAMILY = RuntimeFamily("openvino", blame, summary)


# -- the protocols ------------------------------------------------------------------------------


class OpenVinoInstance(StackingInstance[dict[str, Array]]):
    """One compiled model and its single infer request; ``execute`` runs on a worker thread."""

    def __init__(self, spec: ModelSpec, compiled: ov.CompiledModel, settings: CompileSettings):
        self._spec = spec
        self._compiled: ov.CompiledModel | None = compiled
        self._request: ov.InferRequest | None = compiled.create_infer_request()
        self._batched = spec.max_batch_size > 0
        self._static_rows = spec.max_batch_size if settings.static_batch else 0
        self._pad = settings.pad_batch
        wanted_in = {t.name for t in spec.inputs}
        wanted_out = {t.name for t in spec.outputs}
        in_ports = {_port_name(p, wanted_in): p for p in compiled.inputs}
        out_ports = {_port_name(p, wanted_out): p for p in compiled.outputs}
        self._inputs = {
            t.name: _InputPlan(
                t,
                in_ports[t.name],
                np.dtype(t.datatype.dtype),
                len(in_ports[t.name].get_partial_shape()),
            )
            for t in spec.inputs
            if t.name in in_ports
        }
        self._outputs = {t.name: _OutputPlan(t, out_ports[t.name]) for t in spec.outputs}
        self._output_names = list(self._outputs)
        self._required = [name for name in in_ports if name in self._inputs]

    def _feeds(self, inputs: dict[str, Array]) -> dict[str, Array]:
        name = self._spec.name
        feeds: dict[str, Array] = {}
        for key, array in inputs.items():
            plan = self._inputs.get(key)
            if plan is None:
                raise InvalidInputError(f"unexpected inference input '{key}' for model '{name}'")
            feeds[key] = plan.to_model(array, self._batched, name, self._static_rows)
        missing = [n for n in self._required if n not in feeds]
        if missing:
            raise InvalidInputError(
                f"inference request to model '{name}' is missing input(s) {', '.join(missing)}"
            )
        return feeds

    def _pad_rows(self, feeds: dict[str, Array]) -> tuple[dict[str, Array], int]:
        """With a fixed batch size, pad (if enabled) and return the real row count."""
        rows = next(iter(feeds.values())).shape[0] if feeds else 0
        target = self._static_rows
        if rows == target:
            return feeds, rows
        if not self._pad or rows > target:
            raise InvalidInputError(
                f"model '{self._spec.name}' runs a fixed batch of {target} "
                f"(SKIP_OV_DYNAMIC_BATCHSIZE) but got {rows}; set ENABLE_BATCH_PADDING=YES "
                "to accept smaller batches"
            )
        padded = {
            key: np.concatenate([a, np.zeros((target - rows, *a.shape[1:]), a.dtype)])
            for key, a in feeds.items()
        }
        return padded, rows

    def run(self, feeds: dict[str, Array], output_names: list[str]) -> Outputs:
        """Run one (possibly concatenated) batch and return outputs shaped as the config says."""
        request = self._request
        if request is None:
            raise InternalError(f"an instance of model '{self._spec.name}' was used after close")
        if not output_names:
            return {}
        rows = -1
        if self._static_rows:
            feeds, rows = self._pad_rows(feeds)
        try:
            produced = request.infer(feeds, share_inputs=True, share_outputs=False)
            arrays = {name: produced[self._outputs[name].port] for name in output_names}
        except Exception as exc:  # translated once, here, at the runtime boundary
            raise FAMILY.translate(exc, self._spec.name) from exc
        if rows >= 0:
            arrays = {name: a[:rows] for name, a in arrays.items()}
        return {
            name: self._outputs[name].to_response(np.asarray(a), self._batched, self._spec.name)
            for name, a in arrays.items()
        }

    def close(self) -> None:
        self._request = None
        self._compiled = None


class OpenVinoModel:
    """A read (and reshaped) model version; compiles it once per instance."""

    def __init__(
        self, ctx: LoadContext, core: ov.Core, model: ov.Model, settings: CompileSettings
    ) -> None:
        self._ctx = ctx
        self._core = core
        self._model: ov.Model | None = model
        self._settings = settings
        self._spare: ov.CompiledModel | None = None
        self._lock = threading.Lock()

    def compile(self) -> ov.CompiledModel:
        spec = self._ctx.spec
        model = self._model
        if model is None:
            raise InternalError(f"model '{spec.name}' was used after close")
        wanted = self._settings.compile_config()
        try:
            compiled = self._core.compile_model(model, _DEVICE, wanted)
        except Exception as exc:
            raise ModelLoadError(
                f"failed to load '{spec.name}' version {self._ctx.version}: openvino could not "
                f"compile the model for the CPU: {str(exc).strip()}"
            ) from exc
        for key in ("INFERENCE_NUM_THREADS", "NUM_STREAMS"):
            asked = wanted.get(key, "")
            if asked.isdigit() and int(asked) > 0 and str(compiled.get_property(key)) != asked:
                log.warning(
                    "model '%s': OpenVINO set %s to %s instead of the %s asked for (it caps "
                    "streams at threads and threads at the cores available)",
                    spec.name,
                    key,
                    compiled.get_property(key),
                    asked,
                )
        return compiled

    def keep_spare(self, compiled: ov.CompiledModel) -> None:
        self._spare = compiled

    def create_instance(self, group: InstanceGroupSpec, index: int) -> OpenVinoInstance:
        spec = self._ctx.spec
        if group.kind == "KIND_GPU":
            raise ModelLoadError(
                f"failed to load '{spec.name}': instance group '{group.name}' requests KIND_GPU "
                "but the openvino backend runs on the CPU only"
            )
        with self._lock:
            compiled, self._spare = self._spare, None
        if compiled is None:
            compiled = self.compile()
        return OpenVinoInstance(spec, compiled, self._settings)

    def close(self) -> None:
        self._spare = None
        self._model = None


def _declared(ports: Sequence[Any], wanted: set[str]) -> dict[str, ModelTensor]:
    tensors = {}
    for port in ports:
        config_type = _config_type(port)
        refusal = ""
        if config_type is None:
            refusal = (
                f"has OpenVINO element type {_type_name(port)}, which the openvino backend does "
                "not serve (use the onnxruntime backend for string and bfloat16 tensors)"
            )
        shape = port.get_partial_shape()
        dims = None if shape.rank.is_dynamic else tuple(_dims(shape))
        tensors[_port_name(port, wanted)] = ModelTensor(
            config_type or _type_name(port), dims, refusal
        )
    return tensors


def _check_io(spec: ModelSpec, model: ov.Model) -> None:
    """Config inputs/outputs must exist in the model with the same data types and ranks."""
    check_io(
        spec,
        _declared(model.inputs, {t.name for t in spec.inputs}),
        _declared(model.outputs, {t.name for t in spec.outputs}),
    )


def _target_shapes(
    spec: ModelSpec, model: ov.Model, settings: CompileSettings
) -> dict[str, ov.PartialShape]:
    """The input shapes to compile with: the batch dimension made dynamic (or fixed)."""
    if spec.max_batch_size == 0 and not settings.reshape_io:
        return {}
    wanted = {t.name for t in spec.inputs}
    shapes: dict[str, ov.PartialShape] = {}
    for port in model.inputs:
        name = _port_name(port, wanted)
        tensor = spec.input_by_name.get(name)
        if tensor is None:
            continue
        if settings.reshape_io:
            inner = tensor.reshape if tensor.reshape is not None else tensor.dims
            dims: list[ov.Dimension] = [
                ov.Dimension() if d == -1 else ov.Dimension(d) for d in inner
            ]
        else:
            current = port.get_partial_shape()
            dims = [current[i] for i in range(len(current))]
            if spec.max_batch_size > 0:
                dims = dims[1:]
        if spec.max_batch_size > 0:
            batch = (
                ov.Dimension(spec.max_batch_size)
                if settings.static_batch
                else ov.Dimension(1, spec.max_batch_size)
            )
            dims = [batch, *dims]
        shapes[name] = ov.PartialShape(dims)
    return shapes


class OpenVinoBackend:
    name = "openvino"
    platforms: tuple[str, ...] = ()
    default_model_filename = "model.xml"

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        """Batching and input/output lists from the model, as for ONNX Runtime (§5.7)."""
        if len(config.input) > 0 and len(config.output) > 0:
            log.debug("skipping model configuration auto-complete for '%s'", config.name)
            return
        try:
            model = _read_model(ov.Core(), model_path)
        except Exception as exc:
            raise ConfigError(
                f"unable to auto-complete the configuration from {model_path}: {str(exc).strip()}"
            ) from exc
        ports = [*model.inputs, *model.outputs]
        can_batch = all(
            p.get_partial_shape().rank.is_static
            and len(p.get_partial_shape()) >= 1
            and p.get_partial_shape()[0].is_dynamic
            for p in ports
        )
        batching = apply_batching(
            config,
            can_batch=can_batch,
            default_max_batch_size=default_max_batch_size,
            where=f"model '{config.name or model_path.parent.parent.name}'",
        )
        if len(config.input) == 0:
            add_tensors(config.input, _model_tensors(model.inputs), batching)
        if len(config.output) == 0:
            add_tensors(config.output, _model_tensors(model.outputs), batching)

    def load(self, ctx: LoadContext) -> OpenVinoModel:
        spec = ctx.spec
        prefix = f"failed to load '{spec.name}' version {ctx.version}"
        path = ctx.model_path
        if not path.is_file():
            raise ModelLoadError(f"{prefix}: unable to find '{path}'")
        try:
            settings = parse_settings(spec)
        except ConfigError as exc:
            raise ModelLoadError(f"{prefix}: {exc}") from exc
        core = ov.Core()
        try:
            model = _read_model(core, path)
        except Exception as exc:
            raise ModelLoadError(
                f"{prefix}: openvino could not read {path}: {str(exc).strip()}"
            ) from exc
        try:
            _check_io(spec, model)
            shapes = _target_shapes(spec, model, settings)
            if shapes:
                model.reshape(shapes)
        except ConfigError as exc:
            raise ModelLoadError(f"{prefix}: {exc}") from exc
        except Exception as exc:
            raise ModelLoadError(
                f"{prefix}: openvino could not give the model a batch dimension of up to "
                f"{spec.max_batch_size} ({str(exc).strip()}); try "
                "SKIP_OV_DYNAMIC_BATCHSIZE=YES or max_batch_size: 0"
            ) from exc
        loaded = OpenVinoModel(ctx, core, model, settings)
        loaded.keep_spare(loaded.compile())  # compile errors surface at load, not first use
        return loaded
