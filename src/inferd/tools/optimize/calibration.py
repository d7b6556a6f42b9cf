"""Calibration for static quantization: a :class:`Dataset` as ONNX Runtime's calibration data
reader, and activation ranges calibrated once per model, data and method, cached in the work
folder (so that quantizing again with other exclusions does not calibrate again)."""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.data import Dataset
from inferd.tools.optimize.quant_prepare import MODEL_FILE, PreparedModel

__all__ = ["Calibration", "CalibrationReader", "calibrate", "fingerprint", "ort_method"]

Array = np.ndarray[Any, Any]


class CalibrationReader:
    """A :class:`Dataset` as ONNX Runtime's ``CalibrationDataReader``: batches of ``batch_size``
    rows, in order. ONNX Runtime's abstract class recognises any class with ``get_next`` (its
    ``__subclasshook__``), so this one needs no import of onnxruntime; ``set_range`` serves its
    strided calibration and ``rewind`` starts over."""

    def __init__(self, data: Dataset, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise InvalidArgumentError(
                f"calibration batch size must be at least 1, not {batch_size}"
            )
        self.data = data
        self.batch_size = batch_size
        self._count = -(-data.rows // batch_size)
        self._start, self._end = 0, self._count
        self._next = 0

    def get_next(self) -> dict[str, Array] | None:
        index = self._start + self._next
        if index >= self._end:
            return None
        self._next += 1
        low = index * self.batch_size
        return {
            name: np.ascontiguousarray(array[low : low + self.batch_size])
            for name, array in self.data.inputs.items()
        }

    def __iter__(self) -> Iterator[dict[str, Array]]:
        return self

    def __next__(self) -> dict[str, Array]:
        batch = self.get_next()
        if batch is None:
            raise StopIteration
        return batch

    def __len__(self) -> int:
        return self._count

    def set_range(self, start_index: int, end_index: int) -> None:
        self._start, self._end = max(0, start_index), min(self._count, end_index)
        self._next = 0

    def rewind(self) -> None:
        self._start, self._end, self._next = 0, self._count, 0


def fingerprint(data: Dataset) -> str:
    """A short digest of the rows (names, types, shapes and values)."""
    digest = hashlib.sha256()
    for name in sorted(data.inputs):
        array = np.ascontiguousarray(data.inputs[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape}".encode())
        digest.update(array.tobytes() if array.dtype != object else repr(array.tolist()).encode())
    return digest.hexdigest()[:16]


def ort_method(quantization: Any, method: str) -> Any:
    """ONNX Runtime's ``CalibrationMethod`` for ``minmax``, ``entropy`` or ``percentile``."""
    methods = quantization.CalibrationMethod
    return {
        "minmax": methods.MinMax,
        "entropy": methods.Entropy,
        "percentile": methods.Percentile,
    }[method]


@dataclass(frozen=True)
class Calibration:
    """Where the calibrated ranges are (for ``quantize_static``'s ``calibration_cache_path``),
    and the tensors left out of them because no 8-bit range holds their values."""

    cache: Path
    unrepresentable: tuple[str, ...] = ()


def calibrate(
    quantization: Any,
    prepared: PreparedModel,
    data: Dataset,
    work_dir: Path,
    *,
    method: str,
    percentile: float,
    batch_size: int,
    op_types: Sequence[str] = (),
) -> Calibration:
    """The activation ranges ONNX Runtime's calibrator finds for ``prepared`` on ``data``
    (calibrated now, unless an earlier call left them in ``work_dir/calibration``).

    The ranges do not depend on the exclusions, the per-channel weights or the activation
    type, so every candidate of one method shares them. The calibrator is called directly
    rather than through ``quantize_static``, which cannot pass the histogram sizes: its entropy
    calibration would use 128 bins for 128 quantized bins, which leaves the KL-divergence search
    a single threshold (the min-max one). Entropy here searches 512 bins for 128 quantized bins,
    so a threshold may clip down to a quarter of the largest value (ONNX Runtime's search is
    quadratic in the bins: 2048 bins took 209 s on MiniLM-L6 against 18 s for 512);
    percentile keeps ONNX Runtime's 2048 bins and symmetric ranges. ``op_types`` empty means
    the types ``quantize_static`` calibrates.

    Tensors whose min-max range is infinite or beyond ±1e30 (the ``finfo.min`` attention masks
    of exported transformers) are left out: no 8-bit scale holds them, they would give the
    quantizer infinite scales and the histograms an infinite range. The histogram methods learn
    them from a min-max pass first, which is cached like the others.
    """
    stat = prepared.path.stat()
    key = hashlib.sha256(
        f"{prepared.path}:{stat.st_size}:{stat.st_mtime_ns}:{fingerprint(data)}:{method}:"
        f"{percentile}:{batch_size}:{sorted(op_types)}".encode()
    ).hexdigest()[:16]
    folder = work_dir / "calibration"
    folder.mkdir(parents=True, exist_ok=True)
    cache = folder / f"{method}-{key}.json"
    left_out = cache.with_suffix(".unrepresentable.json")
    if cache.is_file() and left_out.is_file():
        return Calibration(cache, tuple(json.loads(left_out.read_text())))
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    calibrated = list(op_types) or sorted(set(QLinearOpsRegistry) | set(QDQRegistry))
    if method == "minmax":
        ranges = _collect(
            quantization, prepared, data, folder, "minmax", {}, calibrated, set(), batch_size
        )
        bad = {name for name, value in ranges.items() if not _representable(value)}
    else:
        first = calibrate(
            quantization,
            prepared,
            data,
            work_dir,
            method="minmax",
            percentile=percentile,
            batch_size=batch_size,
            op_types=op_types,
        )
        bad = set(first.unrepresentable)
        options: dict[str, object] = (
            {"num_bins": 512, "num_quantized_bins": 128}
            if method == "entropy"
            else {"percentile": percentile}
        )
        ranges = _collect(
            quantization, prepared, data, folder, method, options, calibrated, bad, batch_size
        )
    kept = {name: value for name, value in ranges.items() if name not in bad}
    quantization.save_tensors_data(quantization.TensorsData(ranges.calibration_method, kept), cache)
    left_out.write_text(json.dumps(sorted(bad)))
    return Calibration(cache, tuple(sorted(bad)))


def _collect(
    quantization: Any,
    prepared: PreparedModel,
    data: Dataset,
    folder: Path,
    method: str,
    options: dict[str, object],
    op_types: Sequence[str],
    skip: set[str],
    batch_size: int,
) -> Any:
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        calibrator = quantization.create_calibrator(
            prepared.path,
            op_types,
            augmented_model_path=str(Path(scratch) / MODEL_FILE),
            calibrate_method=ort_method(quantization, method),
            use_external_data_format=prepared.external_data,
            extra_options=options,
        )
        if skip:  # the histogram calibrators collect only the tensors named here
            calibrator.tensors_to_calibrate = set(calibrator.tensors_to_calibrate) - skip
        calibrator.collect_data(CalibrationReader(data, batch_size))
        ranges = calibrator.compute_data()
        del calibrator  # its session holds the augmented model open
    return ranges


def _representable(value: Any) -> bool:
    """Whether a calibrated range is finite and within ±1e30."""
    low, high = value.range_value
    bounds = np.concatenate([np.ravel(low), np.ravel(high)]).astype(np.float64)
    return bool(np.isfinite(bounds).all() and np.abs(bounds).max(initial=0.0) < 1e30)
