"""A version's reference profile: what its inputs and outputs looked like in the training or
validation data, stored as ``drift_profile.json`` in the version's folder.

The file is plain JSON (never a pickle); the repository loader looks only at the files a
model's config names, so the profile never changes how a model loads. Pure data: building a
profile from arrays is in :mod:`.build`, reading one back here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidArgumentError

__all__ = [
    "FORMAT",
    "PROFILE_FILE",
    "ColumnProfile",
    "MultivariateProfile",
    "Profile",
    "TensorProfile",
    "read_profile",
    "write_profile",
]

PROFILE_FILE = "drift_profile.json"
FORMAT = "inferd-drift-profile/1"

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class ColumnProfile:
    """One column of a tabular tensor: a numeric or a categorical feature."""

    feature: str
    kind: str  # "numeric" or "categorical"
    counts: tuple[int, ...]  # reference rows per bin (numeric) or per category (+ other)
    nan: int
    # numeric
    edges: tuple[float, ...] = ()  # inner bin edges (deciles); bins are (-inf, e0], ...
    low: float = 0.0  # the reference's range: values outside are out of range
    high: float = 0.0
    sample: tuple[float, ...] = ()  # reference values for KS and Wasserstein (no NaN)
    # categorical: the categories as text; the last bin of ``counts`` is everything else
    categories: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "feature": self.feature,
            "kind": self.kind,
            "counts": list(self.counts),
            "nan": self.nan,
        }
        if self.kind == "numeric":
            data |= {
                "edges": list(self.edges),
                "low": self.low,
                "high": self.high,
                "sample": list(self.sample),
            }
        else:
            data["categories"] = list(self.categories)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ColumnProfile:
        kind = str(data["kind"])
        if kind not in ("numeric", "categorical"):
            raise ValueError(f"unknown column kind '{kind}'")
        column = cls(
            feature=str(data["feature"]),
            kind=kind,
            counts=tuple(int(c) for c in data["counts"]),
            nan=int(data["nan"]),
            edges=tuple(float(e) for e in data.get("edges", ())),
            low=float(data.get("low", 0.0)),
            high=float(data.get("high", 0.0)),
            sample=tuple(float(v) for v in data.get("sample", ())),
            categories=tuple(str(c) for c in data.get("categories", ())),
        )
        bins = len(column.edges) + 1 if kind == "numeric" else len(column.categories) + 1
        if len(column.counts) != bins:
            raise ValueError(
                f"feature '{column.feature}': {len(column.counts)} counts, {bins} bins"
            )
        if kind == "numeric" and not column.sample:
            raise ValueError(f"feature '{column.feature}': no reference sample")
        return column


@dataclass(frozen=True)
class MultivariateProfile:
    """An embedding or image tensor, tested as a whole: each row is reduced to ``len(mean)``
    block means, projected on the reference's principal components, and the live projections
    are compared with the reference's by a kernel two-sample test."""

    blocks: int  # block means a row is reduced to (the row's size when smaller)
    mean: tuple[float, ...]
    components: tuple[tuple[float, ...], ...]  # k x blocks
    sample: tuple[tuple[float, ...], ...]  # reference rows, projected (n x k)
    nan: int

    def to_json(self) -> dict[str, Any]:
        return {
            "blocks": self.blocks,
            "mean": list(self.mean),
            "components": [list(c) for c in self.components],
            "sample": [list(s) for s in self.sample],
            "nan": self.nan,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MultivariateProfile:
        profile = cls(
            blocks=int(data["blocks"]),
            mean=tuple(float(v) for v in data["mean"]),
            components=tuple(tuple(float(v) for v in c) for c in data["components"]),
            sample=tuple(tuple(float(v) for v in s) for s in data["sample"]),
            nan=int(data["nan"]),
        )
        k = len(profile.components)
        if len(profile.mean) != profile.blocks or any(
            len(c) != profile.blocks for c in profile.components
        ):
            raise ValueError("multivariate profile: the projection does not match its blocks")
        if k == 0 or len(profile.sample) < 2 or any(len(s) != k for s in profile.sample):
            raise ValueError("multivariate profile: the projected sample does not match")
        return profile

    def project(self, rows: Array) -> Array:
        """Rows of the tensor (flattened) reduced and projected: ``(n, k)``."""
        centred = block_means(rows, self.blocks) - np.asarray(self.mean)
        projected: Array = centred @ np.asarray(self.components).T
        return projected


def block_means(rows: Array, blocks: int) -> Array:
    """Each row (flattened) as the means of ``blocks`` contiguous, nearly equal chunks."""
    flat = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
    size = flat.shape[1]
    if size == blocks:
        return flat
    starts = (np.arange(blocks) * size) // blocks
    widths = np.diff(np.append(starts, size))
    means: Array = np.add.reduceat(flat, starts, axis=1) / widths
    return means


@dataclass(frozen=True)
class TensorProfile:
    name: str
    role: str  # "input" or "output"
    datatype: str  # the v2 datatype name
    row_size: int  # values per row (the product of one row's dims)
    columns: tuple[ColumnProfile, ...] = ()  # tabular tensors: one per value of a row
    multivariate: MultivariateProfile | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "role": self.role,
            "datatype": self.datatype,
            "row_size": self.row_size,
        }
        if self.multivariate is not None:
            data["multivariate"] = self.multivariate.to_json()
        else:
            data["columns"] = [c.to_json() for c in self.columns]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TensorProfile:
        role = str(data["role"])
        if role not in ("input", "output"):
            raise ValueError(f"tensor '{data['name']}': unknown role '{role}'")
        mv = data.get("multivariate")
        tensor = cls(
            name=str(data["name"]),
            role=role,
            datatype=str(data["datatype"]),
            row_size=int(data["row_size"]),
            columns=tuple(ColumnProfile.from_json(c) for c in data.get("columns", ())),
            multivariate=None if mv is None else MultivariateProfile.from_json(mv),
        )
        if tensor.multivariate is None and len(tensor.columns) != tensor.row_size:
            raise ValueError(f"tensor '{tensor.name}': {len(tensor.columns)} columns per row")
        return tensor


@dataclass(frozen=True)
class Profile:
    model: str
    version: int
    rows: int
    source: str
    tensors: tuple[TensorProfile, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model": self.model,
            "version": self.version,
            "rows": self.rows,
            "source": self.source,
            "tensors": [t.to_json() for t in self.tensors],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Profile:
        if data.get("format") != FORMAT:
            raise ValueError(f"not a drift profile of format {FORMAT}")
        return cls(
            model=str(data["model"]),
            version=int(data["version"]),
            rows=int(data["rows"]),
            source=str(data.get("source", "")),
            tensors=tuple(TensorProfile.from_json(t) for t in data["tensors"]),
        )


def write_profile(profile: Profile, path: Path) -> None:
    """Write atomically: a server polling the repository never reads half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(profile.to_json(), separators=(",", ":")) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_profile(path: Path) -> Profile:
    """The profile in ``path``; a damaged file is one :class:`InvalidArgumentError` line."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Profile.from_json(data)
    except OSError as exc:
        raise InvalidArgumentError(f"{path}: cannot read the drift profile ({exc})") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidArgumentError(f"{path}: not a valid drift profile ({exc})") from None
