"""INT8 candidates made by ONNX Runtime's own quantizer (``onnxruntime.quantization``), from
the copy :func:`~inferd.tools.optimize.quant_prepare.prepare_model` makes in the work folder.

- :func:`quantize_dynamic_int8`: weights quantized ahead of time (QInt8, per tensor or per
  channel), activations at run time (UInt8); convolutions stay in float unless asked for.
- :func:`quantize_static_int8`: QDQ format with activation ranges calibrated on data by
  min-max, entropy or percentile (:mod:`.calibration`); weights QInt8 per tensor or per
  channel. Activations are QUInt8 on x86 (U8S8: the fast path of VNNI's ``vpdpbusd``; without
  VNNI, weights use 7 bits, ``reduce_range``, to avoid the saturation of ``vpmaddubsw``), QInt8
  elsewhere (S8S8), as ONNX Runtime's documentation advises. ``nodes_to_exclude`` keeps nodes
  in float (mixed precision).

``vnni`` None reads the CPU's features (:mod:`.cpu`).

Each candidate is written to ``work_dir/<name>/model.onnx`` (with ``model.onnx.data`` when the
prepared model keeps external data), checked to load in ONNX Runtime and to hold quantized
operators; otherwise the builder raises :class:`CandidateSkipped` with the reason.
"""

from __future__ import annotations

import contextlib
import io
import logging
import platform
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.tools.optimize.calibration import CalibrationReader, calibrate, ort_method
from inferd.tools.optimize.candidate import Candidate, CandidateSkipped
from inferd.tools.optimize.cpu import detect_cpu
from inferd.tools.optimize.data import Dataset
from inferd.tools.optimize.quant_prepare import (
    MODEL_FILE,
    PreparedModel,
    first_line,
    ort_quantization,
    prepare_model,
)

__all__ = [
    "METHODS",
    "CalibrationReader",
    "Int8Types",
    "PreparedModel",
    "StaticSettings",
    "int8_types",
    "prepare_model",
    "quantize_dynamic_int8",
    "quantize_static_int8",
]

T = TypeVar("T")

#: the calibration methods of static quantization
METHODS = ("minmax", "entropy", "percentile")
_X86 = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})
_QUANTIZED_OPS = frozenset(
    {
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "MatMulInteger",
        "DynamicQuantizeMatMul",
        "ConvInteger",
        "QAttention",
        "DynamicQuantizeLSTM",
        "QEmbedLayerNormalization",
    }
)

# --- settings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StaticSettings:
    """How static INT8 quantization runs. ``activation`` is ``auto`` (see :func:`int8_types`),
    ``uint8`` or ``int8``; ``reduce_range`` None means "as :func:`int8_types` says";
    ``percentile`` is used by the percentile method; ``op_types`` empty means ONNX Runtime's
    default set of quantizable operators."""

    method: str = "minmax"
    per_channel: bool = False
    activation: str = "auto"
    reduce_range: bool | None = None
    percentile: float = 99.999
    batch_size: int = 8
    op_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InvalidArgumentError(
                f"unknown calibration method '{self.method}': use one of {', '.join(METHODS)}"
            )
        if self.activation not in ("auto", "uint8", "int8"):
            raise InvalidArgumentError(
                f"unknown activation type '{self.activation}': use auto, uint8 or int8"
            )
        if not 0 < self.percentile <= 100:
            raise InvalidArgumentError(f"percentile must be in (0, 100], not {self.percentile}")

    def suffix(self) -> str:
        """The part of a candidate name these settings decide, e.g. ``entropy-pc``."""
        return self.method + ("-pc" if self.per_channel else "")


@dataclass(frozen=True)
class Int8Types:
    activation: str  # "uint8" or "int8"
    reduce_range: bool
    reason: str


def int8_types(vnni: bool, machine: str | None = None) -> Int8Types:
    """The activation type and weight range that suit this CPU, following ONNX Runtime's advice
    for CPU inference: on x86, U8S8 (without VNNI, with 7-bit weights against saturation);
    elsewhere (ARM), S8S8."""
    arch = (machine or platform.machine()).lower()
    if arch in _X86:
        if vnni:
            return Int8Types("uint8", False, "U8S8: the fast path of this CPU's VNNI")
        return Int8Types(
            "uint8", True, "U8S8 with 7-bit weights: this x86 CPU has no VNNI (saturation)"
        )
    return Int8Types("int8", False, f"S8S8: the advised types on {arch or 'this'} CPUs")


def _vnni(given: bool | None) -> bool:
    """``given``, or whether this machine's CPU has VNNI (unknown features count as none)."""
    return detect_cpu().vnni if given is None else given


def _resolve(settings: StaticSettings, vnni: bool) -> Int8Types:
    auto = int8_types(vnni)
    activation = auto.activation if settings.activation == "auto" else settings.activation
    reduce_range = auto.reduce_range if settings.reduce_range is None else settings.reduce_range
    chosen = settings.activation == "auto" and settings.reduce_range is None
    return Int8Types(activation, reduce_range, auto.reason if chosen else "as asked")


# --- builders ---------------------------------------------------------------------------------


def quantize_dynamic_int8(
    prepared: PreparedModel,
    work_dir: Path,
    *,
    per_channel: bool = False,
    vnni: bool | None = None,
    op_types: Sequence[str] = (),
    nodes_to_exclude: Sequence[str] = (),
    name: str | None = None,
    parent: str | None = None,
) -> Candidate:
    """Dynamic INT8: QInt8 weights, activations quantized at run time. ``op_types`` empty
    means ONNX Runtime's dynamic set (MatMul and Gemm, Attention, LSTM, Gather...) without
    Conv: ONNX Runtime's dynamically quantized convolution (ConvInteger) runs slower than float
    on CPU (7.8 times on a small CNN at batch 64 on this project's machine), and static INT8
    quantizes convolutions instead."""
    quantization = ort_quantization()
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    name = name or "int8-dynamic" + ("-pc" if per_channel else "")
    _check_excluded(prepared.path, nodes_to_exclude)
    types = int8_types(_vnni(vnni))
    chosen = list(op_types) or sorted(set(IntegerOpsRegistry) - {"Conv"})
    notes = [*prepared.notes, f"weights: {types.reason}"]
    if "Conv" not in chosen and "Conv" in _op_types(prepared.path):
        notes.append(
            "Conv nodes stay in float: dynamically quantized convolutions run slower than "
            "float on CPU (static INT8 quantizes them)"
        )
    path = _output(work_dir, name)
    _run(
        lambda: quantization.quantize_dynamic(
            prepared.path,
            path,
            op_types_to_quantize=chosen,
            per_channel=per_channel,
            reduce_range=types.reduce_range,
            weight_type=quantization.QuantType.QInt8,
            nodes_to_exclude=list(nodes_to_exclude),
            use_external_data_format=prepared.external_data,
        )
    )
    _check_quantized(path, name)
    recipe = {
        "method": "dynamic",
        "weights": "int8",
        "activations": "uint8 (at run time)",
        "per_channel": per_channel,
        "reduce_range": types.reduce_range,
        "op_types": chosen,
        "excluded": list(nodes_to_exclude),
        "preprocessed": prepared.preprocessed,
    }
    return Candidate(name, "int8-dynamic", path, recipe=recipe, notes=tuple(notes), parent=parent)


def quantize_static_int8(
    prepared: PreparedModel,
    calibration: Dataset,
    work_dir: Path,
    settings: StaticSettings = StaticSettings(),
    *,
    vnni: bool | None = None,
    nodes_to_exclude: Sequence[str] = (),
    kind: str = "int8-static",
    name: str | None = None,
    parent: str | None = None,
) -> Candidate:
    """Static INT8 in QDQ format, activation ranges calibrated on ``calibration``."""
    quantization = ort_quantization()
    name = name or f"{kind}-{settings.suffix()}"
    _check_excluded(prepared.path, nodes_to_exclude)
    types = _resolve(settings, _vnni(vnni))
    qtype = {"uint8": quantization.QuantType.QUInt8, "int8": quantization.QuantType.QInt8}
    path = _output(work_dir, name)
    ranges = _run(
        lambda: calibrate(
            quantization,
            prepared,
            calibration,
            work_dir,
            method=settings.method,
            percentile=settings.percentile,
            batch_size=settings.batch_size,
            op_types=settings.op_types,
        )
    )
    notes = [*prepared.notes, f"activations {types.activation}: {types.reason}"]
    unrepresentable = _touching(prepared.path, ranges.unrepresentable)
    if unrepresentable:
        kinds = ", ".join(sorted({op for _, op in unrepresentable}))
        notes.append(
            f"kept {len(unrepresentable)} node(s) ({kinds}) in float: they read or write "
            f"{len(ranges.unrepresentable)} tensor(s) whose values no 8-bit range holds "
            "(beyond ±1e30, such as attention masks)"
        )
    excluded = [*nodes_to_exclude, *(n for n, _ in unrepresentable if n not in nodes_to_exclude)]
    _run(
        lambda: quantization.quantize_static(
            prepared.path,
            path,
            None,  # the ranges come from the cache
            quant_format=quantization.QuantFormat.QDQ,
            op_types_to_quantize=list(settings.op_types) or None,
            per_channel=settings.per_channel,
            reduce_range=types.reduce_range,
            activation_type=qtype[types.activation],
            weight_type=quantization.QuantType.QInt8,
            nodes_to_exclude=excluded,
            use_external_data_format=prepared.external_data,
            calibrate_method=ort_method(quantization, settings.method),
            calibration_cache_path=ranges.cache,
        )
    )
    _check_quantized(path, name)
    recipe = {
        "method": "static",
        "format": "QDQ",
        "calibration": settings.method,
        **({"percentile": settings.percentile} if settings.method == "percentile" else {}),
        "per_channel": settings.per_channel,
        "weights": "int8",
        "activations": types.activation,
        "reduce_range": types.reduce_range,
        "calibration_rows": calibration.rows,
        "calibration_data": calibration.source,
        "op_types": list(settings.op_types),
        "excluded": excluded,
        "unrepresentable_tensors": list(ranges.unrepresentable),
        "preprocessed": prepared.preprocessed,
    }
    return Candidate(name, kind, path, recipe=recipe, notes=tuple(notes), parent=parent)


def _output(work_dir: Path, name: str) -> Path:
    folder = work_dir / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder / MODEL_FILE


def _run(step: Callable[[], T]) -> T:
    # the quantizer warns through the root logger about every per-channel axis a weight lacks
    # (LayerNorm scales...), which says nothing the candidate's figures do not: errors only
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        # the calibrators print their progress; keep it out of the command's own output
        with contextlib.redirect_stdout(io.StringIO()):
            return step()
    except (InvalidArgumentError, UnavailableError):
        raise
    except Exception as exc:  # ONNX Runtime's quantizer raises whatever it meets
        raise CandidateSkipped(
            f"ONNX Runtime's quantizer failed on this model: {first_line(exc)}"
        ) from exc
    finally:
        root.setLevel(level)


def _op_types(path: Path) -> set[str]:
    import onnx

    return {node.op_type for node in onnx.load(path, load_external_data=False).graph.node}


def _touching(path: Path, tensors: Sequence[str]) -> list[tuple[str, str]]:
    """(name, op type) of the nodes that read or write any of ``tensors``."""
    if not tensors:
        return []
    import onnx

    wanted = set(tensors)
    nodes = onnx.load(path, load_external_data=False).graph.node
    return [(n.name, n.op_type) for n in nodes if wanted & {*n.input, *n.output}]


def _check_excluded(path: Path, nodes: Sequence[str]) -> None:
    if not nodes:
        return
    import onnx

    names = {node.name for node in onnx.load(path, load_external_data=False).graph.node}
    unknown = [n for n in nodes if n not in names]
    if unknown:
        raise InvalidArgumentError(
            f"nodes to keep in float not in the model: {', '.join(repr(u) for u in unknown)}"
        )


def _check_quantized(path: Path, name: str) -> None:
    """The candidate loads in ONNX Runtime and has something quantized in it."""
    import onnxruntime as ort

    if not _op_types(path) & _QUANTIZED_OPS:
        raise CandidateSkipped(f"{name}: the quantizer found nothing to quantize in this model")
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise CandidateSkipped(
            f"{name}: ONNX Runtime cannot run the quantized model: {first_line(exc)}"
        ) from exc
