"""Change detection for poll mode."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def fingerprint(model_dir: Path) -> str:
    """A digest of every file's relative path, size and modification time under ``model_dir``."""
    digest = hashlib.sha1(usedforsecurity=False)
    for root, dirnames, filenames in os.walk(model_dir):
        dirnames.sort()
        for fname in sorted(filenames):
            path = Path(root) / fname
            try:
                st = path.stat()
            except OSError:
                continue
            rel = path.relative_to(model_dir).as_posix()
            digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()
