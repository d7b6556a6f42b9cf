"""Candidates served by inferd's openvino backend: the ONNX model converted to OpenVINO IR, and
NNCF's post-training INT8 quantization of it.

Each writes ``<out_dir>/<name>/model.xml`` with its ``model.bin`` beside it (the file names the
openvino backend loads by default) and returns the config ``parameters`` the served model needs
to run as checked here: the backend reads ``HINT_BF16`` (``YES``: bfloat16 inference precision,
``NO``: FP32). That matters on CPUs with native BF16 (AVX-512 BF16 or AMX), where OpenVINO's own
default precision is bfloat16: an FP32 or INT8 model served without ``HINT_BF16=NO`` would run
its float layers in bfloat16 there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from inferd.tools.optimize.candidate import OPENVINO_PLATFORM, Candidate, CandidateSkipped
from inferd.tools.optimize.encoder import find_encoder
from inferd.tools.optimize.verify import (
    EXACT,
    INSTALL_HINT,
    INT8,
    Tolerance,
    check_agreement,
    head_rows,
    load_onnx,
    onnx_session,
    openvino_compiled,
    run_onnx,
    run_openvino,
)

__all__ = [
    "FP32_PARAMETERS",
    "RowBatches",
    "build_nncf_int8",
    "build_openvino",
    "check_candidate",
    "check_ir",
    "convert_to_ir",
    "openvino_module",
]

Array = np.ndarray[Any, Any]

#: the openvino backend's parameters for FP32 inference precision, and the compile property
FP32_PARAMETERS: Mapping[str, str] = {"HINT_BF16": "NO"}
_FP32_PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32"}

#: calibration rows NNCF sees by default (its own default subset size)
NNCF_SUBSET = 300


class RowBatches(Protocol):
    """What NNCF calibration reads: rows of model inputs in batches (a calibration Dataset)."""

    @property
    def rows(self) -> int: ...

    def batches(self, size: int) -> Iterator[dict[str, Array]]: ...


def openvino_module() -> Any:
    """The ``openvino`` module; :class:`CandidateSkipped` naming the install when it is missing
    (OpenVINO candidates are optional: the run goes on without them)."""
    try:
        import openvino as ov
    except ImportError:
        raise CandidateSkipped(
            f"OpenVINO is not installed (pip install openvino, or {INSTALL_HINT})"
        ) from None
    return ov


def convert_to_ir(source: Path, path: Path) -> Any:
    """Convert an ONNX model to OpenVINO IR at ``path`` (``.xml`` with its ``.bin``); FP32
    weights are kept (no FP16 compression), so the IR computes what the ONNX model does.
    Returns the converted ``openvino.Model``."""
    ov = openvino_module()
    model = _converted(ov, source)
    path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(path), compress_to_fp16=False)
    return model


def _converted(ov: Any, source: Path) -> Any:
    """``ov.convert_model`` of the ONNX model, the process's logging left as it was;
    :class:`CandidateSkipped` with OpenVINO's reason when it cannot convert it."""
    # convert_model sets the root logger to ERROR and puts it back only when it succeeds: keep
    # the process's logging as it was either way, or a failed conversion silences every warning
    # logged after it
    root = logging.getLogger()
    level, filters, handlers = root.level, list(root.filters), list(root.handlers)
    try:
        model = ov.convert_model(str(source))
    except Exception as exc:
        raise CandidateSkipped(
            f"OpenVINO could not convert the ONNX model: {_last_line(exc)}"
        ) from exc
    finally:
        root.setLevel(level)
        root.filters[:] = filters
        root.handlers[:] = handlers
    return model


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def check_ir(
    source: Path,
    path: Path,
    sample: Mapping[str, Array],
    properties: Mapping[str, str],
    tolerance: Tolerance,
    what: str,
) -> float:
    """Compile the IR with ``properties``, compare it with the ONNX source on the sample's
    first rows, and return the largest absolute error."""

    def run(feeds: dict[str, Array], _outputs: list[str]) -> dict[str, Array]:
        return run_openvino(openvino_compiled(path, properties), feeds)

    return check_candidate(source, sample, run, tolerance, what, "OpenVINO")


def check_candidate(
    source: Path,
    sample: Mapping[str, Array],
    run: Callable[[dict[str, Array], list[str]], Mapping[str, Array]],
    tolerance: Tolerance,
    what: str,
    runtime: str,
) -> float:
    """Run the candidate (``run(feeds, output names)``) and the ONNX source on the sample's
    first rows, check that they agree within ``tolerance``, and return the largest absolute
    error; :class:`CandidateSkipped` when the candidate does not run on ``runtime``."""
    feeds = head_rows(sample)
    want = run_onnx(onnx_session(source), feeds)
    try:
        got = run(feeds, list(want))
    except Exception as exc:
        raise CandidateSkipped(f"{what} does not run on {runtime}: {_last_line(exc)}") from exc
    found = check_agreement(want, got, tolerance, what)
    return max(a.max_abs_error for a in found)


def build_openvino(
    source: Path,
    out_dir: Path,
    *,
    sample: Mapping[str, Array],
    parent: str | None = None,
) -> Candidate:
    """The ONNX model as OpenVINO IR, served in FP32 by the openvino backend."""
    name = "openvino"
    path = out_dir / name / "model.xml"
    convert_to_ir(source, path)
    error = check_ir(source, path, sample, _FP32_PROPERTIES, EXACT, "the OpenVINO IR")
    return Candidate(
        name=name,
        kind="openvino",
        path=path,
        platform=OPENVINO_PLATFORM,
        parameters=dict(FP32_PARAMETERS),
        recipe={
            "method": "openvino.convert_model",
            "inference_precision": "f32",
            "max_abs_error": error,
        },
        notes=(
            "Converted to OpenVINO IR with FP32 weights and served by the openvino backend in "
            "FP32 (HINT_BF16=NO).",
        ),
        parent=parent,
    )


def _calibration_items(data: RowBatches, subset_size: int) -> list[dict[str, Array]]:
    """Single rows for NNCF, at most ``subset_size``; a list, because NNCF reads them more
    than once (statistics, then smooth quant and bias correction)."""
    return list(islice(data.batches(1), subset_size))


def build_nncf_int8(
    source: Path,
    out_dir: Path,
    *,
    sample: Mapping[str, Array],
    calibration: RowBatches,
    subset_size: int = NNCF_SUBSET,
    parent: str | None = None,
) -> Candidate:
    """NNCF post-training INT8 quantization of the model's OpenVINO IR, calibrated on up to
    ``subset_size`` rows of ``calibration`` (``ModelType.TRANSFORMER`` for encoders)."""
    ov = openvino_module()
    try:
        import nncf
    except ImportError:
        raise CandidateSkipped(
            f"NNCF is not installed (pip install nncf, or {INSTALL_HINT})"
        ) from None
    if calibration.rows == 0:
        raise CandidateSkipped("NNCF quantization needs calibration rows; the data has none")
    encoder = find_encoder(load_onnx(source))
    name = "nncf-int8"
    path = out_dir / name / "model.xml"
    model = _converted(ov, source)
    items = _calibration_items(calibration, subset_size)
    options: dict[str, Any] = {"subset_size": len(items)}
    if encoder is not None:
        options["model_type"] = nncf.ModelType.TRANSFORMER
    try:
        quantized = nncf.quantize(model, nncf.Dataset(items), **options)
    except Exception as exc:
        raise CandidateSkipped(f"NNCF could not quantize the model: {_last_line(exc)}") from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(quantized, str(path), compress_to_fp16=False)
    error = check_ir(source, path, sample, _FP32_PROPERTIES, INT8, "the NNCF INT8 model")
    kind = "transformer" if encoder is not None else "default"
    return Candidate(
        name=name,
        kind="nncf-int8",
        path=path,
        platform=OPENVINO_PLATFORM,
        parameters=dict(FP32_PARAMETERS),
        recipe={
            "method": "nncf.quantize",
            "model_type": kind,
            "calibration_rows": len(items),
            "inference_precision": "f32 (layers left in float)",
            "max_abs_error": error,
        },
        notes=(
            f"NNCF post-training INT8 quantization ({kind} model type) calibrated on "
            f"{len(items)} rows; the layers NNCF leaves in float run in FP32 (HINT_BF16=NO).",
        ),
        parent=parent,
    )
