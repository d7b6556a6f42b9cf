"""Named shared-memory segments and the memory fence the rings and the arena rely on.

A segment is a file in ``/dev/shm`` (tmpfs) that one process creates, sizes and later unlinks,
and that any process may map by name. We manage the file ourselves rather than through
``multiprocessing.shared_memory`` so that CPython's resource tracker never unlinks (or warns
about) a segment another process still uses: the creator unlinks it, explicitly.

Memory ordering. Processes sharing a segment communicate through 64-bit counters and state
words at 8-byte aligned offsets of a page-aligned mapping. Every such word has one writer.
Reads and writes go through a ``memoryview`` cast to ``"q"``, which CPython stores and loads
with one ``memcpy`` of 8 bytes, compiled to a single aligned 8-byte move: single-copy atomic on
x86-64 and AArch64, so a reader never sees half of a counter.

Two orderings are needed on top of that:

* *publish*: a payload written before the counter that announces it is visible before the
  counter (store → store), and a payload read before the counter that releases it is read
  before the release (load → store). x86-64 (TSO) keeps both orders by itself. The compiler
  cannot move the stores either: each one is a separate call through the interpreter.
* *sleep/wake* (the Dekker pattern): a process that stores its own counter and then loads the
  peer's counter must not have the load performed before the store — the one reordering TSO
  allows, and the one that would lose a doorbell. :class:`Fence` is a full barrier for that:
  an uncontended ``threading.Lock`` release and acquire, which CPython implements with atomic
  read-modify-write operations (``lock``-prefixed on x86-64, store-release followed by
  load-acquire on AArch64), about 0.1 µs.

On architectures with weaker ordering than TSO the fence is also issued on the publish paths
(:data:`NEEDS_PUBLISH_FENCE`).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import platform
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

#: Where segments live. tmpfs: memory-backed, visible to every process of the machine.
SHM_DIR = Path("/dev/shm")
#: Names of our segments start with this, so leaks are easy to spot (``ls /dev/shm``).
PREFIX = "inferd-fe-"
#: x86-64 keeps stores in order and loads in order (TSO); elsewhere publishing needs a fence.
NEEDS_PUBLISH_FENCE = platform.machine().lower() not in {"x86_64", "amd64"}


def available() -> bool:
    """True where the front-end transport runs: Linux with eventfd and a tmpfs ``/dev/shm``."""
    return hasattr(os, "eventfd") and SHM_DIR.is_dir()


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or len(name) > 200:
        raise ValueError(f"invalid shared-memory segment name {name!r}")


class Fence:
    """A full memory barrier (see the module docstring). Owned per object: never contended."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def __call__(self) -> None:
        self._lock.release()
        self._lock.acquire()


class Segment:
    """One mapped segment. ``create`` makes (and later ``unlink``s) it; ``attach`` only maps it."""

    def __init__(self, name: str, mapping: mmap.mmap, owner: bool) -> None:
        self.name = name
        self.size = len(mapping)
        self.owner = owner
        self._mmap: mmap.mmap | None = mapping
        self.buffer = memoryview(mapping)

    @classmethod
    def create(cls, name: str | None, size: int) -> Segment:
        if size <= 0:
            raise ValueError(f"segment size must be positive, got {size}")
        name = name or f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        _check_name(name)
        path = SHM_DIR / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            mapping = mmap.mmap(fd, size)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        return cls(name, mapping, owner=True)

    @classmethod
    def attach(cls, name: str) -> Segment:
        _check_name(name)
        fd = os.open(SHM_DIR / name, os.O_RDWR)
        try:
            mapping = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        return cls(name, mapping, owner=False)

    def close(self) -> None:
        """Unmap. Views handed out must have been released first."""
        if self._mmap is None:
            return
        self.buffer.release()
        self._mmap.close()
        self._mmap = None

    def unlink(self) -> None:
        """Remove the name (the creator's job); mappings stay valid until closed."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(SHM_DIR / self.name)


_View = TypeVar("_View")


def attach_view(name: str, build: Callable[[Segment], _View]) -> _View:
    """Map the segment ``name`` and build a view of it (a ring, an arena); the mapping is
    closed again when the view refuses the segment (a wrong magic number or version)."""
    segment = Segment.attach(name)
    try:
        return build(segment)
    except BaseException:
        segment.close()
        raise
