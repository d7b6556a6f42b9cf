"""The float model every quantizer reads: a copy in the work folder, pre-processed.

:func:`prepare_model` runs ONNX Runtime's ``quant_pre_process`` once (symbolic shape inference,
ONNX Runtime's basic optimizations, ONNX shape inference) into ``work_dir/prepared``, falling
back to ONNX shape inference alone, then to the model as given, and saying so in its notes
(including the steps ``quant_pre_process`` logs as failed and carries on after). Every node gets
a unique name, so that any node can be kept in float by name. Quantizers read this copy, so
nothing is ever written beside the source model (ONNX Runtime's quantizer writes a
shape-inferred file beside the model it is given). Models over 2 GB, or stored with external
data, keep their weights in ``model.onnx.data`` beside ``model.onnx``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.tools.optimize.scratch import inside

__all__ = ["MODEL_FILE", "PreparedModel", "first_line", "ort_quantization", "prepare_model"]

MODEL_FILE = "model.onnx"
_TWO_GB = 2**31


def ort_quantization() -> Any:
    """``onnxruntime.quantization``, or an error naming the extra to install."""
    try:
        import onnxruntime.quantization as quantization
    except ImportError as exc:
        raise UnavailableError(
            f"quantization needs onnxruntime and onnx ({exc}): pip install 'inferd[optimize]'"
        ) from None
    return quantization


@dataclass(frozen=True)
class PreparedModel:
    """The float model the quantizers read: a copy in the work folder, pre-processed if that
    worked. ``source`` is the model it was made from; ``external_data`` says whether it (and so
    every candidate made from it) keeps its weights in a separate file."""

    path: Path
    source: Path
    external_data: bool
    preprocessed: bool
    notes: tuple[str, ...] = ()


def prepare_model(model: Path, work_dir: Path) -> PreparedModel:
    """``model`` pre-processed for quantization into ``work_dir/prepared/model.onnx``."""
    import onnx

    model, work_dir = model.resolve(), work_dir.resolve()  # the pre-processing runs inside

    quantizer = ort_quantization()
    try:
        header = onnx.load(model, load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError, OSError...
        raise InvalidArgumentError(
            f"{model}: not a readable ONNX model ({first_line(exc)})"
        ) from None
    external = _uses_external_data(header) or _size(model) >= _TWO_GB
    target = work_dir / "prepared"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    path = target / MODEL_FILE
    storage = {
        "save_as_external_data": external,
        "all_tensors_to_one_file": True,
        "external_data_location": f"{MODEL_FILE}.data",
    }
    notes: list[str] = []
    preprocessed = True
    try:
        with _logged_errors() as errors, contextlib.redirect_stdout(io.StringIO()), inside(target):
            quantizer.quant_pre_process(model, path, **storage)
    except Exception as exc:  # the pre-processing is optional: say why it was skipped
        notes.append(f"quantization pre-processing failed ({first_line(exc)})")
        try:
            with (
                _logged_errors() as errors,
                contextlib.redirect_stdout(io.StringIO()),
                inside(target),
            ):
                quantizer.quant_pre_process(model, path, skip_symbolic_shape=True, **storage)
            notes.append("pre-processed without the symbolic shape inference")
        except Exception as again:
            notes.append(
                f"pre-processing without it failed too ({first_line(again)}); quantizing the "
                "model as given"
            )
            preprocessed = False
            _copy_model(model, path, external)
    if any("Optimization Failed" in e for e in errors):
        notes.append(
            "ONNX Runtime could not optimize the model while pre-processing it; it is "
            "quantized unoptimized"
        )
    elif errors:
        notes.append(f"quantization pre-processing: {errors[0]}")
    renamed = _name_nodes(path)
    if renamed:
        notes.append(f"named {renamed} unnamed node(s) so that they can be excluded by name")
    return PreparedModel(path, model, external, preprocessed, tuple(notes))


class _ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(first_line(Exception(record.getMessage())))


@contextlib.contextmanager
def _logged_errors() -> Iterator[list[str]]:
    """The errors ONNX Runtime's quantization tools log (and carry on after) meanwhile."""
    logger = logging.getLogger("onnxruntime.quantization")
    handler = _ErrorLog()
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def _uses_external_data(model: Any) -> bool:
    from onnx.external_data_helper import uses_external_data

    return any(uses_external_data(t) for t in model.graph.initializer)


def _size(model: Path) -> int:
    return model.stat().st_size


def _copy_model(source: Path, path: Path, external: bool) -> None:
    import onnx

    loaded = onnx.load(source)
    onnx.save(
        loaded,
        path,
        save_as_external_data=external,
        all_tensors_to_one_file=True,
        location=f"{MODEL_FILE}.data",
    )


def _name_nodes(path: Path) -> int:
    """Give every unnamed (or twice-named) node of the main graph a unique name; the count."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    seen: set[str] = set()
    renamed = 0
    for index, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            base = node.name or f"{node.op_type}_{index}"
            name, suffix = base, 1
            while name in seen:
                name, suffix = f"{base}_{suffix}", suffix + 1
            node.name = name
            renamed += 1
        seen.add(node.name)
    if renamed:  # initializers stored outside keep pointing at the same file beside it
        onnx.save(model, path)
    return renamed


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (or its type's name), for one-line notes."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
