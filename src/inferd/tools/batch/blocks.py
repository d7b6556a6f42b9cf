"""What every source reads: blocks of rows, and the pieces the source modules share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferd.errors import InvalidArgumentError
from inferd.tools.batch.rows import Column

__all__ = ["IMAGE_SUFFIXES", "Block", "require_pyarrow"]

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"})


@dataclass(slots=True)
class Block:
    """Rows ``start .. start + count - 1``: their columns, and the rows that could not be read
    (by offset in the block)."""

    start: int
    count: int
    columns: dict[str, Column]
    errors: dict[int, str] = field(default_factory=dict)


def require_pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise InvalidArgumentError(
            "inferd batch needs pyarrow: pip install 'inferd[batch]'"
        ) from None
    return pyarrow
