"""Protocol-neutral answers of the metadata and repository endpoints."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TensorMetadata:
    name: str
    datatype: str
    shape: list[int]


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One row of the repository index. Never-loaded models carry only a name."""

    name: str
    version: str | None = None
    state: str | None = None
    reason: str = ""
    # inferd's own fields after Triton's (HTTP JSON only), e.g. on-demand state and memory
    details: tuple[tuple[str, str], ...] = ()
