"""Comparing two answers to one request (a shadow's with the primary's, a canary's candidate
with its primary): pure functions over the output arrays.

Each compared output is cut into rows (the batch dimension of a batching model; one row
otherwise) and a row agrees when every compared output agrees on it:

* classifier-shaped rows (floating point, two or more values, and a probability vector: values
  in [0, 1] summing to 1; or any row of an output with a label file) agree on the top-1 class;
* other floating-point outputs agree within ``atol + rtol * |primary|`` element-wise;
* integers, booleans and BYTES agree when equal.

Besides agreement, the largest absolute difference and the cosine similarity of the
floating-point values are reported. :func:`compare_many` compares many answers at once with a
few numpy calls per output (what a shadow of every request needs to stay cheap); it gives the
same figures as :func:`compare_outputs` on each.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.rollout.policy import CompareSpec

__all__ = ["Agreement", "compare_many", "compare_outputs"]

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


def _float_rows_agree(
    a: Array, b: Array, diff: Array, spec: CompareSpec, *, labelled: bool
) -> Array:
    """Which rows of two floating-point outputs (``rows x values``) agree: on the top class
    where the output is a classifier's (``labelled``, or a row of probabilities: values in
    [0, 1] summing to 1), within the tolerance elsewhere."""
    close: Array = np.all(diff <= spec.atol + spec.rtol * np.abs(a), axis=1)
    if a.shape[1] < 2:
        return close
    same_top: Array = a.argmax(axis=1) == b.argmax(axis=1)
    if labelled:
        return same_top
    in_range = (a.min(axis=1) >= -1e-6) & (a.max(axis=1) <= 1.0 + 1e-6)
    probabilities = in_range & (np.abs(a.sum(axis=1) - 1.0) <= 1e-3)
    return np.where(probabilities, same_top, close)


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
            diff = np.nan_to_num(np.abs(fa - fb), nan=np.inf)  # a NaN differs from anything
            if diff.size:
                err = float(diff.max())
                max_err = err if max_err is None else max(max_err, err)
            floats = True
            dot += float(np.sum(fa * fb))
            norm_a += float(np.sum(fa * fa))
            norm_b += float(np.sum(fb * fb))
            agree &= _float_rows_agree(fa, fb, diff, spec, labelled=name in labelled)
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


Pair = tuple[Mapping[str, Array], Mapping[str, Array]]


def compare_many(
    pairs: Sequence[Pair],
    spec: CompareSpec,
    *,
    batched: bool,
    labelled: Collection[str] = (),
) -> list[Agreement]:
    """:func:`compare_outputs` of each ``(primary, other)`` pair, computed on the pairs' rows
    stacked together; answers whose outputs differ in names or shapes are compared one by
    one."""
    if not pairs:
        return []
    first_a, first_b = pairs[0]
    names = list(spec.outputs) or sorted(set(first_a) & set(first_b))
    stacked = _stack(pairs, names, batched) if names else None
    if stacked is None:
        return [compare_outputs(a, b, spec, batched=batched, labelled=labelled) for a, b in pairs]
    rows, columns = stacked
    starts = np.concatenate(([0], np.cumsum(rows)[:-1]))
    agree = np.ones(int(rows.sum()), dtype=bool)
    n = len(pairs)
    max_err = np.full(n, -np.inf)
    dot, norm_a, norm_b = np.zeros(n), np.zeros(n), np.zeros(n)
    floats = False
    for name, (a, b) in zip(names, columns, strict=True):
        if a.dtype.kind == "f" and b.dtype.kind == "f":
            floats = True
            diff = np.nan_to_num(np.abs(a - b), nan=np.inf)
            if diff.shape[1]:
                max_err = np.maximum(max_err, np.maximum.reduceat(diff.max(axis=1), starts))
            dot += np.add.reduceat(np.einsum("ij,ij->i", a, b, dtype=np.float64), starts)
            norm_a += np.add.reduceat(np.einsum("ij,ij->i", a, a, dtype=np.float64), starts)
            norm_b += np.add.reduceat(np.einsum("ij,ij->i", b, b, dtype=np.float64), starts)
            agree &= _float_rows_agree(a, b, diff, spec, labelled=name in labelled)
        else:
            agree &= (a == b).all(axis=1)
    agreed = np.add.reduceat(agree.astype(np.int64), starts).tolist()
    counts = rows.tolist()
    if not floats:
        return [Agreement(r, g, None, None) for r, g in zip(counts, agreed, strict=True)]
    with np.errstate(divide="ignore", invalid="ignore"):
        cosine = dot / (np.sqrt(norm_a) * np.sqrt(norm_b))
    zero_a, zero_b = norm_a == 0.0, norm_b == 0.0
    cosine = np.where(zero_a & zero_b, 1.0, np.where(zero_a | zero_b, 0.0, cosine)).tolist()
    errors = [None if e == -np.inf else e for e in max_err.tolist()]
    return [
        Agreement(r, g, e, c) for r, g, e, c in zip(counts, agreed, errors, cosine, strict=True)
    ]


def _stack(
    pairs: Sequence[Pair], names: list[str], batched: bool
) -> tuple[np.ndarray[Any, Any], list[tuple[Array, Array]]] | None:
    """Each pair's rows, and each output of every pair stacked as ``(rows, values)``; None when
    the pairs cannot be stacked (an output missing or shaped apart, a request of no rows)."""
    rows = np.empty(len(pairs), dtype=np.int64)
    columns: list[tuple[Array, Array]] = []
    for k, name in enumerate(names):
        tops: list[Array] = []
        others: list[Array] = []
        width = -1
        for i, (a, b) in enumerate(pairs):
            x, y = a.get(name), b.get(name)
            if x is None or y is None or x.shape != y.shape:
                return None
            count = int(x.shape[0]) if batched and x.ndim > 0 else 1
            if k == 0:
                rows[i] = count
            if count == 0 or count != rows[i] or (x.dtype.kind == "f") != (y.dtype.kind == "f"):
                return None
            if x.ndim != 2 or x.shape[0] != count:
                x, y = x.reshape(count, -1), y.reshape(count, -1)
            if width not in (-1, x.shape[1]):
                return None
            width = x.shape[1]
            tops.append(x)
            others.append(y)
        columns.append((np.concatenate(tops), np.concatenate(others)))
    return rows, columns
