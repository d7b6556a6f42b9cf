"""Comparing two answers to one request (a shadow's with the primary's, a canary's candidate
with its primary): pure functions over the output arrays.

Each compared output is cut into rows (the batch dimension of a batching model; one row
otherwise) and a row agrees when every compared output agrees on it:

* classifier-shaped outputs (floating point, two or more values per row, each row a probability
  vector: values in [0, 1] summing to 1, or an output with a label file) agree on the top-1
  class;
* other floating-point outputs agree within ``atol + rtol * |primary|`` element-wise;
* integers, booleans and BYTES agree when equal.

Besides agreement, the largest absolute difference and the cosine similarity of the
floating-point values are reported.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.rollout.policy import CompareSpec

__all__ = ["Agreement", "compare_outputs"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True, slots=True)
class Agreement:
    rows: int
    agreed_rows: int
    max_abs_error: float | None  # over floating-point outputs; None when there were none
    cosine: float | None

    @property
    def agreed(self) -> bool:
        return self.agreed_rows == self.rows


def _is_probabilities(rows: Array) -> bool:
    if rows.shape[1] < 2 or rows.size == 0:
        return False
    if float(rows.min()) < -1e-6 or float(rows.max()) > 1.0 + 1e-6:
        return False
    return bool(np.allclose(rows.sum(axis=1), 1.0, atol=1e-3))


def compare_outputs(
    primary: Mapping[str, Array],
    other: Mapping[str, Array],
    spec: CompareSpec,
    *,
    batched: bool,
    labelled: Collection[str] = (),
) -> Agreement:
    """``labelled``: outputs with a label file (classifier outputs, whatever their values)."""
    names = list(spec.outputs) or sorted(set(primary) & set(other))
    first = next((primary[n] for n in names if n in primary), None)
    rows = int(first.shape[0]) if batched and first is not None and first.ndim > 0 else 1
    agree = np.ones(rows, dtype=bool)
    max_err: float | None = None
    dot = norm_a = norm_b = 0.0
    floats = False
    for name in names:
        a, b = primary.get(name), other.get(name)
        if a is None or b is None or a.shape != b.shape:
            agree[:] = False
            continue
        a2 = a.reshape(rows, -1)
        b2 = b.reshape(rows, -1)
        if a2.dtype.kind == "f" and b2.dtype.kind == "f":
            fa = a2.astype(np.float64, copy=False)
            fb = b2.astype(np.float64, copy=False)
            diff = np.abs(fa - fb)
            if diff.size:
                err = float(np.nanmax(diff)) if not np.isnan(diff).all() else float("inf")
                max_err = err if max_err is None else max(max_err, err)
            floats = True
            dot += float(np.sum(fa * fb))
            norm_a += float(np.sum(fa * fa))
            norm_b += float(np.sum(fb * fb))
            if fa.shape[1] >= 2 and (name in labelled or _is_probabilities(fa)):
                agree &= fa.argmax(axis=1) == fb.argmax(axis=1)
            else:
                close = diff <= spec.atol + spec.rtol * np.abs(fa)
                agree &= close.all(axis=1)
        else:
            agree &= (a2 == b2).all(axis=1)
    cosine: float | None = None
    if floats:
        if norm_a == 0.0 and norm_b == 0.0:
            cosine = 1.0
        elif norm_a > 0.0 and norm_b > 0.0:
            cosine = dot / float(np.sqrt(norm_a) * np.sqrt(norm_b))
        else:
            cosine = 0.0
    return Agreement(rows, int(agree.sum()), max_err, cosine)
