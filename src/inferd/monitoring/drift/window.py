"""Bounded sketches of one version's live data: sliding windows and data-quality counters.

Memory is fixed when the profile loads: each tabular tensor keeps its last ``window_rows``
rows (numeric values as float64, categories as small integer codes) in a ring, each embedding
or image tensor its last ``multivariate_rows`` rows projected to a few components, plus one
counter per feature. Nothing grows with the traffic. Only the monitor's worker thread touches a
:class:`VersionWindow`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.monitoring.drift.build import category_text
from inferd.monitoring.drift.reference import Profile, TensorProfile

__all__ = ["Ring", "TensorWindow", "VersionWindow"]

Array = np.ndarray[Any, Any]


class Ring:
    """The last ``capacity`` rows of ``width`` values."""

    def __init__(self, capacity: int, width: int, dtype: Any) -> None:
        self._data = np.zeros((capacity, width), dtype=dtype)
        self._next = 0
        self.filled = 0

    @property
    def capacity(self) -> int:
        return len(self._data)

    def push(self, rows: Array) -> None:
        capacity = len(self._data)
        if len(rows) >= capacity:
            self._data[:] = rows[-capacity:]
            self._next, self.filled = 0, capacity
            return
        end = self._next + len(rows)
        if end <= capacity:
            self._data[self._next : end] = rows
        else:
            split = capacity - self._next
            self._data[self._next :] = rows[:split]
            self._data[: end - capacity] = rows[split:]
        self._next = end % capacity
        self.filled = min(capacity, self.filled + len(rows))

    def rows(self) -> Array:
        """The rows held, in no particular order (a view)."""
        return self._data[: self.filled]

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)


@dataclass
class TensorWindow:
    """The live side of one profiled tensor."""

    profile: TensorProfile
    numeric: tuple[int, ...]  # column indices of the numeric features
    categorical: tuple[int, ...]
    values: Ring | None  # numeric columns
    codes: Ring | None  # categorical columns: category index; len(categories) = other
    projected: Ring | None  # multivariate
    lookups: tuple[dict[str, int], ...] = ()  # per categorical column: category -> code
    low: Array = field(default_factory=lambda: np.zeros(0))
    high: Array = field(default_factory=lambda: np.zeros(0))
    nan: Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per column
    out_of_range: Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    unseen: Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    missing: int = 0  # requests that did not carry this (optional) input
    mismatched: int = 0  # requests whose rows were not of the profile's size (not observed)

    @classmethod
    def of(cls, profile: TensorProfile, window_rows: int, multivariate_rows: int) -> TensorWindow:
        if profile.multivariate is not None:
            k = len(profile.multivariate.components)
            return cls(
                profile,
                (),
                (),
                None,
                None,
                Ring(multivariate_rows, k, np.float64),
                nan=np.zeros(1, dtype=np.int64),
            )
        numeric = tuple(i for i, c in enumerate(profile.columns) if c.kind == "numeric")
        categorical = tuple(i for i, c in enumerate(profile.columns) if c.kind == "categorical")
        columns = profile.columns
        return cls(
            profile,
            numeric,
            categorical,
            Ring(window_rows, len(numeric), np.float64) if numeric else None,
            Ring(window_rows, len(categorical), np.int32) if categorical else None,
            None,
            lookups=tuple(
                {c: code for code, c in enumerate(columns[i].categories)} for i in categorical
            ),
            low=np.array([columns[i].low for i in numeric]),
            high=np.array([columns[i].high for i in numeric]),
            nan=np.zeros(len(columns), dtype=np.int64),
            out_of_range=np.zeros(len(numeric), dtype=np.int64),
            unseen=np.zeros(len(categorical), dtype=np.int64),
        )

    @property
    def filled(self) -> int:
        ring = self.values or self.codes or self.projected
        return ring.filled if ring is not None else 0

    def add(self, rows: Array) -> None:
        """Rows of this tensor from answered requests (rows along the first dimension)."""
        flat = rows.reshape(len(rows), -1)
        if flat.shape[1] != self.profile.row_size:
            self.mismatched += 1
            return
        mv = self.profile.multivariate
        if mv is not None:
            values = flat.astype(np.float64, copy=False)
            finite = np.isfinite(values).all(axis=1)
            self.nan[0] += int(len(values) - finite.sum())
            good = values[finite][-self.projected.capacity :] if self.projected else values[:0]
            if self.projected is not None and len(good):
                self.projected.push(mv.project(good))
            return
        if self.values is not None:
            numbers = flat[:, list(self.numeric)].astype(np.float64)
            missing = np.isnan(numbers)
            self.nan[list(self.numeric)] += missing.sum(axis=0)
            with np.errstate(invalid="ignore"):
                self.out_of_range += ((numbers < self.low) | (numbers > self.high)).sum(axis=0)
            self.values.push(numbers)
        if self.codes is not None:
            codes = np.empty((len(flat), len(self.categorical)), dtype=np.int32)
            for j, (i, lookup) in enumerate(zip(self.categorical, self.lookups, strict=True)):
                other = len(lookup)
                column = [lookup.get(category_text(v), other) for v in flat[:, i]]
                codes[:, j] = column
                self.unseen[j] += column.count(other)
            self.codes.push(codes)

    @property
    def nbytes(self) -> int:
        return sum(r.nbytes for r in (self.values, self.codes, self.projected) if r is not None)


class VersionWindow:
    """Every profiled tensor of one version, and the counts of what was observed."""

    def __init__(self, profile: Profile, window_rows: int, multivariate_rows: int) -> None:
        self.profile = profile
        self.tensors = {
            t.name: TensorWindow.of(t, window_rows, multivariate_rows) for t in profile.tensors
        }
        self.rows = 0
        self.requests = 0
        self.since_evaluation = 0

    def add(self, requests: Sequence[Mapping[str, Array]], rows: int) -> None:
        """Answered requests (each its tensors by name, rows along the first dimension),
        ``rows`` in all: one concatenation per tensor instead of one push per request."""
        self.requests += len(requests)
        self.rows += rows
        self.since_evaluation += rows
        for name, window in self.tensors.items():
            arrays = [tensors[name] for tensors in requests if name in tensors]
            window.missing += len(requests) - len(arrays)
            if not arrays:
                continue
            if len({a.shape[1:] for a in arrays}) == 1:
                window.add(np.concatenate(arrays) if len(arrays) > 1 else arrays[0])
            else:
                for array in arrays:
                    window.add(array)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())
