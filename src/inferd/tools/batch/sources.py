"""Where rows come from: the source protocol, format detection, and opening a source.

A source knows its row count and reads any range of rows as columns named like the model's
inputs, plus the rows it could not read (a file that is not an image, a request that does not
decode), which become bad rows. Formats:

- ``parquet``: a file, or a folder of ``*.parquet`` files read in name order; one column per
  input (fixed-size lists or lists for tensors, plain values for one-element inputs);
- ``npz``: one array per input, the first axis being the rows;
- ``csv``: a header line; a column per input, or, for a model with a single 1-D input, every
  column in order as that input's features;
- ``images``: a folder of image files in name order, for a model with one image input;
- ``json``: a folder of KServe v2 inference requests (``*.json``) in name order; each request's
  rows (its batch dimension) are consecutive rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from inferd.core.model_spec import ModelSpec
from inferd.errors import InvalidArgumentError
from inferd.tools.batch.blocks import IMAGE_SUFFIXES, Block
from inferd.tools.batch.rows import InputPlan

__all__ = ["FORMATS", "Block", "Source", "SourceOptions", "detect_format", "open_source"]

FORMATS = ("parquet", "npz", "csv", "images", "json")


class Source(Protocol):
    rows: int

    def read(self, start: int, stop: int) -> Block: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SourceOptions:
    image_scale: float = 1.0  # images: pixel values (0..255) are multiplied by this


def detect_format(path: Path) -> str:
    """The format of ``path`` from its suffix, or for a folder from the files it holds."""
    if path.is_file():
        suffix = path.suffix.lower()
        found = {".parquet": "parquet", ".pq": "parquet", ".npz": "npz", ".csv": "csv"}.get(suffix)
        if found is None:
            raise InvalidArgumentError(
                f"cannot tell the format of {path} from its suffix; pass --input-format "
                f"({', '.join(FORMATS)})"
            )
        return found
    if path.is_dir():
        suffixes = {p.suffix.lower() for p in path.iterdir() if p.is_file()}
        kinds = [
            kind
            for kind, found in (
                ("parquet", ".parquet" in suffixes),
                ("json", ".json" in suffixes),
                ("images", bool(suffixes & IMAGE_SUFFIXES)),
            )
            if found
        ]
        if len(kinds) == 1:
            return kinds[0]
        raise InvalidArgumentError(
            f"cannot tell what the folder {path} holds ({'; '.join(kinds) or 'no known files'}); "
            f"pass --input-format ({', '.join(FORMATS)})"
        )
    raise InvalidArgumentError(f"--input {path} does not exist")


def open_source(
    path: Path,
    fmt: str,
    spec: ModelSpec,
    plans: tuple[InputPlan, ...],
    options: SourceOptions = SourceOptions(),
) -> Source:
    """Open ``path`` as ``fmt`` for the model ``spec``; raise InvalidArgumentError saying why
    it cannot be read."""
    if not path.exists():
        raise InvalidArgumentError(f"--input {path} does not exist")
    if fmt == "parquet":
        from inferd.tools.batch.columnar import ParquetSource

        return ParquetSource(path, plans)
    if fmt == "npz":
        from inferd.tools.batch.columnar import NpzSource

        return NpzSource(path, plans)
    if fmt == "csv":
        from inferd.tools.batch.columnar import CsvSource

        return CsvSource(path, plans)
    if fmt == "images":
        from inferd.tools.batch.files import ImageSource

        return ImageSource(path, spec, plans, options.image_scale)
    if fmt == "json":
        from inferd.tools.batch.files import JsonSource

        return JsonSource(path, spec)
    raise InvalidArgumentError(f"unknown input format '{fmt}': choose one of {', '.join(FORMATS)}")
