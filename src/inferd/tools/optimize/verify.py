"""Checks that a built model still answers like its source, before it is handed over.

This is the builders' own guard against broken graphs (a fusion that changed the numbers, a
conversion that lost an output), not the evaluation: the evaluation measures the task metric
on the eval data. Each builder runs its model and the source on a few calibration rows and
compares every output with a tolerance that suits the change (:data:`EXACT` for rewrites that
keep FP32, :data:`HALF` for FP16 / BF16, :data:`INT8` for quantized graphs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import UnavailableError
from inferd.tools.optimize.candidate import CandidateSkipped

__all__ = [
    "EXACT",
    "HALF",
    "INT8",
    "Agreement",
    "Tolerance",
    "agreement",
    "check_agreement",
    "head_rows",
    "load_onnx",
    "onnx_session",
    "onnxruntime",
    "openvino_compiled",
    "run_onnx",
    "run_openvino",
]

Array = np.ndarray[Any, Any]
Feeds = Mapping[str, Array]

INSTALL_HINT = "pip install 'inferd[optimize]'"

#: rows of the sample each check runs (enough to see a wrong graph, cheap to run twice)
CHECK_ROWS = 8


@dataclass(frozen=True)
class Tolerance:
    """How far a built model may stray: ``max |got - want| <= relative * max |want|`` per
    output, and every row's cosine similarity to the source at least ``min_cosine``."""

    name: str
    relative: float
    min_cosine: float


EXACT = Tolerance("fp32 rewrite", relative=1e-3, min_cosine=0.9999)
HALF = Tolerance("half precision", relative=5e-2, min_cosine=0.99)
# INT8 only has to be recognisably the same model here (a peaked softmax may move a lot under
# INT8): how much accuracy it keeps is for the evaluation, and for repair, to judge
INT8 = Tolerance("int8", relative=1.0, min_cosine=0.5)


@dataclass(frozen=True)
class Agreement:
    """How one output of a built model compares with its source on the sample rows."""

    output: str
    max_abs_error: float
    scale: float  # max |source output|
    min_cosine: float  # the worst row's cosine similarity

    def within(self, tolerance: Tolerance) -> bool:
        bound = tolerance.relative * max(self.scale, 1e-6)
        return self.max_abs_error <= bound and self.min_cosine >= tolerance.min_cosine

    def describe(self) -> str:
        return (
            f"output '{self.output}': max |error| {self.max_abs_error:.3g} "
            f"(outputs reach {self.scale:.3g}), worst row cosine {self.min_cosine:.6f}"
        )


def _row_cosines(want: Array, got: Array) -> Array:
    rows = want.shape[0] if want.ndim else 1
    a = want.reshape(rows, -1).astype(np.float64)
    b = got.reshape(rows, -1).astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.sum(a * b, axis=1)
    # rows that are zero in both agree; a zero row on one side only does not
    both_zero = (np.linalg.norm(a, axis=1) == 0) & (np.linalg.norm(b, axis=1) == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)
    result: Array = np.where(both_zero, 1.0, cos)
    return result


def agreement(name: str, want: Array, got: Array) -> Agreement:
    """Compare one output (rows first); a shape mismatch or NaN is total disagreement."""
    if want.shape != got.shape or not np.all(np.isfinite(got)):
        return Agreement(name, float("inf"), float(np.max(np.abs(want), initial=0.0)), -1.0)
    if want.dtype.kind not in "fc":  # integer or boolean outputs (labels, ids) must be equal
        same = bool(np.array_equal(want, got))
        return Agreement(name, 0.0 if same else float("inf"), 1.0, 1.0 if same else -1.0)
    diff = np.abs(want.astype(np.float64) - got.astype(np.float64))
    return Agreement(
        name,
        float(np.max(diff, initial=0.0)),
        float(np.max(np.abs(want), initial=0.0)),
        float(np.min(_row_cosines(want, got), initial=1.0)),
    )


def check_agreement(
    want: Mapping[str, Array], got: Mapping[str, Array], tolerance: Tolerance, what: str
) -> tuple[Agreement, ...]:
    """Every output of ``want`` compared; raise :class:`CandidateSkipped` when one strays."""
    missing = [name for name in want if name not in got]
    if missing:
        raise CandidateSkipped(f"{what} lost output(s) {', '.join(missing)}: not used")
    found = tuple(agreement(name, want[name], got[name]) for name in want)
    bad = [a for a in found if not a.within(tolerance)]
    if bad:
        raise CandidateSkipped(
            f"{what} does not answer like its source ({tolerance.name} tolerance): "
            + "; ".join(a.describe() for a in bad)
        )
    return found


def head_rows(sample: Feeds, rows: int = CHECK_ROWS) -> dict[str, Array]:
    """The first ``rows`` rows of every input."""
    return {name: np.ascontiguousarray(array[:rows]) for name, array in sample.items()}


def onnxruntime() -> Any:
    """The ``onnxruntime`` module, or an error that names the install."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise UnavailableError(f"ONNX Runtime is not installed: {INSTALL_HINT}") from None
    return ort


def load_onnx(path: Path) -> Any:
    """An ONNX model read from ``path`` (with its external data), or an error naming the
    install when the onnx package is missing."""
    try:
        import onnx
    except ImportError:
        raise UnavailableError(f"the onnx package is not installed: {INSTALL_HINT}") from None
    return onnx.load(str(path))


def onnx_session(path: Path | bytes, *, threads: int = 1, **kwargs: Any) -> Any:
    """An ONNX Runtime CPU session, all graph optimizations on (as inferd serves it)."""
    ort = onnxruntime()
    options = kwargs.pop("options", None) or ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    source = path if isinstance(path, bytes) else str(path)
    return ort.InferenceSession(
        source, sess_options=options, providers=["CPUExecutionProvider"], **kwargs
    )


def run_onnx(session: Any, feeds: Feeds, outputs: Sequence[str] | None = None) -> dict[str, Array]:
    """Run ``session`` on the feeds it takes; the results by output name."""
    wanted = [o.name for o in session.get_outputs()] if outputs is None else list(outputs)
    taken = {i.name for i in session.get_inputs()}
    values = session.run(wanted, {k: v for k, v in feeds.items() if k in taken})
    return {name: np.asarray(value) for name, value in zip(wanted, values, strict=True)}


def openvino_compiled(path: Path, properties: Mapping[str, str], *, threads: int = 1) -> Any:
    """An OpenVINO model compiled for the CPU with ``properties`` (e.g. a precision hint)."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(path))
    config = {"INFERENCE_NUM_THREADS": str(threads), "NUM_STREAMS": "1", **properties}
    return core.compile_model(model, "CPU", config)


def run_openvino(compiled: Any, feeds: Feeds) -> dict[str, Array]:
    """Run a compiled OpenVINO model; the results under every name of each output."""
    taken = {name for port in compiled.inputs for name in port.get_names()}
    request = compiled.create_infer_request()
    result = request.infer({k: v for k, v in feeds.items() if k in taken}, share_outputs=False)
    return {
        name: np.asarray(result[port]) for port in compiled.outputs for name in port.get_names()
    }
