"""Building a reference profile from rows of a model's inputs and outputs (pure).

A tensor whose rows hold at most :data:`MAX_COLUMNS` values is tabular: each value of a row
is a feature. ``BYTES`` and ``BOOL`` features are categorical, and so are integer features
with at most :data:`MAX_INTEGER_CATEGORIES` distinct values in the data; the others are
numeric. A numeric tensor with larger rows (an embedding, an image) is profiled as a whole for
the multivariate test. Other tensors (long text rows) are not profiled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from inferd.monitoring.drift.reference import (
    ColumnProfile,
    MultivariateProfile,
    Profile,
    TensorProfile,
    block_means,
)

__all__ = [
    "MAX_COLUMNS",
    "MAX_INTEGER_CATEGORIES",
    "ProfileLimits",
    "TensorData",
    "build_profile",
    "category_text",
    "feature_names",
]

Array = np.ndarray[Any, Any]

MAX_COLUMNS = 64
MAX_INTEGER_CATEGORIES = 20


@dataclass(frozen=True)
class ProfileLimits:
    sample_rows: int = 10_000  # reference values kept per numeric feature
    max_categories: int = 200  # the most frequent; the rest share one bin
    blocks: int = 256  # block means an embedding or image row is reduced to
    components: int = 8  # principal components kept for the multivariate test
    multivariate_rows: int = 300  # projected reference rows kept for it
    seed: int = 0


@dataclass(frozen=True)
class TensorData:
    name: str
    role: str  # "input" or "output"
    datatype: str  # v2 name
    rows: Array  # rows along the first dimension
    names: tuple[str, ...] | None = None  # the columns' names, when the data had them


def feature_names(tensor: str, row_size: int) -> tuple[str, ...]:
    """``NAME`` for a one-value tensor, else ``NAME[i]`` for each value of a row."""
    return (tensor,) if row_size == 1 else tuple(f"{tensor}[{i}]" for i in range(row_size))


def category_text(value: Any) -> str:
    """A category as the profile stores it: text (bytes decoded as UTF-8)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (np.integer, int)):
        return str(int(value))
    return str(value)


def build_profile(
    model: str,
    version: int,
    tensors: Sequence[TensorData],
    source: str,
    limits: ProfileLimits | None = None,
) -> Profile:
    limits = limits or ProfileLimits()
    rng = np.random.default_rng(limits.seed)
    counts = {len(t.rows) for t in tensors}
    if len(counts) != 1 or 0 in counts:
        raise ValueError("every tensor of a profile needs the same number of rows, at least one")
    built = [p for t in tensors if (p := _tensor(t, limits, rng)) is not None]
    return Profile(model, version, counts.pop(), source, tuple(built))


def _tensor(
    data: TensorData, limits: ProfileLimits, rng: np.random.Generator
) -> TensorProfile | None:
    rows = np.asarray(data.rows)
    row_size = prod(rows.shape[1:])
    flat = rows.reshape(len(rows), row_size)
    common = (data.name, data.role, data.datatype, row_size)
    if row_size <= MAX_COLUMNS:
        names = data.names or feature_names(data.name, row_size)
        columns = tuple(
            _column(names[i], flat[:, i], data.datatype, limits, rng) for i in range(row_size)
        )
        return TensorProfile(*common, columns=columns)
    if data.datatype in ("BYTES", "BOOL"):
        return None
    return TensorProfile(*common, multivariate=_multivariate(flat, limits, rng))


def _column(
    name: str, values: Array, datatype: str, limits: ProfileLimits, rng: np.random.Generator
) -> ColumnProfile:
    if datatype in ("BYTES", "BOOL"):
        return _categorical(name, [category_text(v) for v in values], 0, limits)
    if values.dtype.kind in "iu":
        distinct = np.unique(values)
        if distinct.size <= MAX_INTEGER_CATEGORIES:
            return _categorical(name, [str(int(v)) for v in values], 0, limits)
    numbers = values.astype(np.float64)
    nan = int(np.isnan(numbers).sum())
    present = numbers[~np.isnan(numbers)]
    if present.size == 0:
        raise ValueError(f"feature '{name}' has no value that is not NaN")
    edges = tuple(float(e) for e in np.unique(np.quantile(present, np.linspace(0.1, 0.9, 9))))
    bins = np.bincount(
        np.searchsorted(np.asarray(edges), present, side="left"), minlength=len(edges) + 1
    )
    keep = min(present.size, limits.sample_rows)
    sample = present if keep == present.size else rng.choice(present, keep, replace=False)
    return ColumnProfile(
        feature=name,
        kind="numeric",
        counts=tuple(int(c) for c in bins),
        nan=nan,
        edges=edges,
        low=float(present.min()),
        high=float(present.max()),
        sample=tuple(float(f"{v:.7g}") for v in sample),
    )


def _categorical(name: str, values: list[str], nan: int, limits: ProfileLimits) -> ColumnProfile:
    frequent = Counter(values).most_common()
    kept = sorted(c for c, _ in frequent[: limits.max_categories])
    counted = dict(frequent)
    other = sum(n for c, n in frequent[limits.max_categories :])
    return ColumnProfile(
        feature=name,
        kind="categorical",
        counts=(*(counted[c] for c in kept), other),
        nan=nan,
        categories=tuple(kept),
    )


def _multivariate(
    flat: Array, limits: ProfileLimits, rng: np.random.Generator
) -> MultivariateProfile:
    values = flat.astype(np.float64)
    finite = np.isfinite(values).all(axis=1)
    nan = int((~finite).sum())
    values = values[finite]
    if len(values) < 2:
        raise ValueError("an embedding or image tensor needs at least two rows without NaN")
    blocks = min(limits.blocks, values.shape[1])
    fit = values if len(values) <= 5000 else values[rng.choice(len(values), 5000, replace=False)]
    reduced = block_means(fit, blocks)
    mean = reduced.mean(axis=0)
    _, singular, vt = np.linalg.svd(reduced - mean, full_matrices=False)
    rank = int((singular > singular[0] * 1e-9).sum()) if singular.size and singular[0] else 0
    k = max(1, min(limits.components, rank))
    components = vt[:k]
    keep = min(len(values), limits.multivariate_rows)
    chosen = values[rng.choice(len(values), keep, replace=False)]
    projected = (block_means(chosen, blocks) - mean) @ components.T
    return MultivariateProfile(
        blocks=blocks,
        mean=tuple(float(v) for v in mean),
        components=tuple(tuple(float(v) for v in c) for c in components),
        sample=tuple(tuple(float(v) for v in row) for row in projected),
        nan=nan,
    )


def tensor_names(profile: Profile) -> Mapping[str, TensorProfile]:
    return {t.name: t for t in profile.tensors}
