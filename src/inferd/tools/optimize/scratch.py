"""Some converters leave scratch files in the working directory (ONNX Runtime's symbolic shape
inference writes ``sym_shape_infer_temp.onnx`` there when it gives up); running them inside a
folder of the run's own keeps those files with the candidate, out of the user's folder."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["inside"]


@contextlib.contextmanager
def inside(folder: Path) -> Iterator[None]:
    """``folder`` as the working directory for the block (the process's: use it only where
    nothing else runs meanwhile, as in the builds, which run one at a time)."""
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)
