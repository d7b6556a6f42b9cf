"""Where a model's payload log files go and when a file is full: pure rules.

The directory is the operator's. A model name only picks a folder inside it, through
:func:`model_folder`: a name made of letters, digits, ``_``, ``-`` and ``.`` (not starting with
a dot) is used as it is; any other name is spelled with those characters only, after a ``+``
(which the plain names never contain) and before a hash of the real name, so two names never
share a folder and no name can leave the directory (no separator, no ``..``, no hidden
folder). :func:`confined` then checks the resolved folder
(symbolic links followed) is still inside the directory.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from pathlib import Path

from inferd.repository.paths import is_inside

__all__ = [
    "confined",
    "file_name",
    "is_log_file",
    "is_log_folder",
    "model_folder",
    "should_rotate",
]

_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}")
_UNSAFE_CHAR = re.compile(r"[^A-Za-z0-9_.\-]")
_SPELLED = re.compile(r"\+[A-Za-z0-9_.\-]{1,64}-[0-9a-f]{12}")
#: what follows ``<folder>-`` in a name :func:`file_name` makes (or, hidden and ending in
#: ``.partial``, a Parquet file being written)
_FILE_TAIL = re.compile(r"[0-9]{8}T[0-9]{6}\.[0-9]{6}Z-[0-9]{6,}\.(?:jsonl|parquet)")


def model_folder(model: str) -> str:
    """The folder name (one path part, safe on any file system) of ``model``'s log files."""
    if _SAFE.fullmatch(model) is not None:
        return model
    digest = hashlib.sha256(model.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    spelled = _UNSAFE_CHAR.sub("_", model)[:64]
    return f"+{spelled}-{digest}"


def confined(directory: Path, folder: str) -> Path:
    """``directory / folder``, refused (``ValueError``) if it resolves outside ``directory``."""
    if not folder or "/" in folder or "\\" in folder or folder in (".", ".."):
        raise ValueError(f"{folder!r} is not a folder name")
    path = directory / folder
    if not is_inside(path, directory):
        raise ValueError(f"{path} resolves outside the payload log directory {directory}")
    return path


def file_name(folder: str, opened_ns: int, sequence: int, suffix: str) -> str:
    """``<folder>-<UTC time opened>-<sequence>.<suffix>``: names sort by time, and the
    sequence keeps two files opened in the same microsecond apart."""
    moment = datetime.fromtimestamp(opened_ns // 1000 / 1e6, tz=timezone.utc)
    return f"{folder}-{moment.strftime('%Y%m%dT%H%M%S.%fZ')}-{sequence:06d}.{suffix}"


def is_log_folder(name: str) -> bool:
    """Whether ``name`` is a folder name :func:`model_folder` makes."""
    return _SAFE.fullmatch(name) is not None or _SPELLED.fullmatch(name) is not None


def is_log_file(folder: str, name: str) -> bool:
    """Whether ``name``, in the folder ``folder``, is a name :func:`file_name` makes there, or
    that of a Parquet file being written (``.<such a name>.partial``)."""
    if name.startswith(".") and name.endswith(".partial"):
        name = name[1 : -len(".partial")]
        if not name.endswith(".parquet"):
            return False
    prefix = folder + "-"
    return name.startswith(prefix) and _FILE_TAIL.fullmatch(name, len(prefix)) is not None


def should_rotate(
    size: int, opened_ns: int, now_ns: int, rotate_bytes: int, rotate_secs: float
) -> bool:
    """A file that holds ``rotate_bytes`` or is ``rotate_secs`` old (0: never by age) is
    closed and the next record starts a new one."""
    if size >= rotate_bytes:
        return True
    return rotate_secs > 0 and now_ns - opened_ns >= rotate_secs * 1e9
