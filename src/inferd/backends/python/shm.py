"""The shared-memory arena one Python model instance uses to move tensors to and from its worker.

An arena is a file in ``/dev/shm`` (tmpfs) that the server creates, sizes and unlinks, and that
both processes ``mmap``. We manage the file ourselves rather than through
``multiprocessing.shared_memory`` so that CPython's resource tracker never unlinks (or warns
about) a segment the other process still uses.

Layout of one batch: tensors are placed one after another from offset 0, each aligned to
:data:`ALIGNMENT` bytes. Fixed-size tensors are stored as their raw C-order bytes; BYTES tensors
as a sequence of ``<4-byte little-endian length><bytes>`` elements (Triton's serialisation).
The worker writes its outputs after the inputs, or from offset 0 of a bigger arena when the
server had to grow it (the worker still holds the old mapping for the inputs meanwhile).
"""

from __future__ import annotations

import mmap
import os
import secrets
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.core import datatypes
from inferd.errors import InvalidInputError, OverloadedError

Array = np.ndarray[Any, Any]

#: Every tensor starts on a multiple of this many bytes (a cache line; enough for any dtype).
ALIGNMENT = 64
#: Where arenas live. tmpfs: memory-backed, visible to every process of the machine.
SHM_DIR = Path("/dev/shm")
#: Names of our segments start with this, so leaks are easy to spot (``ls /dev/shm``).
PREFIX = "inferd-py-"
#: The first size of an arena unless the model config asks for another.
DEFAULT_INITIAL_BYTES = 16 * 1024 * 1024
#: Share of the free space of ``/dev/shm`` one arena may take when it grows.
FREE_SPACE_SHARE = 0.5

_LENGTH = struct.Struct("<I")


def align(offset: int) -> int:
    return (offset + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def human_bytes(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def shm_free_bytes(directory: Path = SHM_DIR) -> int:
    """Bytes still free on the tmpfs holding the arenas."""
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


# -- the mapping ---------------------------------------------------------------------------------


class Arena:
    """One mapped segment. ``create`` makes (and later ``unlink``s) it; ``attach`` only maps it."""

    def __init__(self, path: Path, size: int, mapping: mmap.mmap, owner: bool) -> None:
        self.path = path
        self.size = size
        self._mmap: mmap.mmap | None = mapping
        self._owner = owner
        self.buffer = memoryview(mapping)
        probe = np.frombuffer(self.buffer, dtype=np.uint8, count=1)
        #: Where the mapping starts in this process (to recognise views of it; see locate()).
        self.address: int = probe.__array_interface__["data"][0]
        del probe

    @classmethod
    def create(cls, size: int, tag: str = "", directory: Path = SHM_DIR) -> Arena:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in tag)[:60]
        path = directory / f"{PREFIX}{os.getpid()}-{safe}-{secrets.token_hex(4)}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                # posix_fallocate reserves the pages now: a full /dev/shm fails here, with a
                # clear error, instead of killing a process with SIGBUS on first touch later.
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                path.unlink(missing_ok=True)
                raise OverloadedError(
                    f"cannot allocate a {human_bytes(size)} shared-memory arena in {directory}: "
                    f"{exc.strerror} ({human_bytes(shm_free_bytes(directory))} free)"
                ) from None
            mapping = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(path, size, mapping, owner=True)

    @classmethod
    def attach(cls, path: str | Path, size: int) -> Arena:
        fd = os.open(path, os.O_RDWR)
        try:
            mapping = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(Path(path), size, mapping, owner=False)

    @property
    def closed(self) -> bool:
        return self._mmap is None

    def close(self) -> bool:
        """Unmap (and, for the creator, unlink). False if numpy views still pin the mapping;
        the name is gone anyway, and the memory goes with the last view."""
        if self._owner:
            self.unlink()
        if self._mmap is None:
            return True
        self.buffer.release()
        try:
            self._mmap.close()
        except BufferError:
            self.buffer = memoryview(self._mmap)
            return False
        self._mmap = None
        return True

    def unlink(self) -> None:
        self.path.unlink(missing_ok=True)

    def detach(self) -> bool:
        """Unmap without unlinking (a segment handed to the other process, which unlinks it)."""
        self._owner = False
        return self.close()


# -- tensors in the arena ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TensorRef:
    """Where one tensor lies in the arena; the only thing about it that crosses the pipe."""

    name: str
    datatype: str  # protocol name, "FP32", "BYTES", ...
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    def to_wire(self) -> list[Any]:
        return [self.name, self.datatype, list(self.shape), self.offset, self.nbytes]

    @classmethod
    def from_wire(cls, item: Sequence[Any]) -> TensorRef:
        name, datatype, shape, offset, nbytes = item
        return cls(str(name), str(datatype), tuple(int(d) for d in shape), int(offset), int(nbytes))


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, bytearray | memoryview | np.bytes_):
        return bytes(item)
    return str(item).encode("utf-8")


def serialize_bytes(array: Array) -> bytes:
    """Triton's BYTES serialisation: each element as a 4-byte little-endian length + its bytes."""
    parts: list[bytes] = []
    for item in array.ravel(order="C"):
        data = _as_bytes(item)
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes(buffer: memoryview, count: int, what: str = "tensor") -> Array:
    """``count`` elements of a serialised BYTES tensor as an object array of ``bytes``."""
    out = np.empty(count, dtype=object)
    pos, end = 0, len(buffer)
    for i in range(count):
        if pos + 4 > end:
            raise InvalidInputError(f"{what}: BYTES data ends after {i} of {count} elements")
        (length,) = _LENGTH.unpack_from(buffer, pos)
        pos += 4
        if pos + length > end:
            raise InvalidInputError(f"{what}: BYTES element {i} runs past the end of its data")
        out[i] = bytes(buffer[pos : pos + length])
        pos += length
    return out


@dataclass(slots=True)
class Staged:
    """A tensor ready to be copied in: its datatype, shape and bytes (raw or serialised)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: Any  # a C-contiguous ndarray, or the serialised bytes of a BYTES tensor
    nbytes: int


def stage(name: str, array: Array) -> Staged:
    """Prepare ``array`` for the arena (BYTES are serialised now, so their size is known)."""
    dt = datatypes.from_dtype(array.dtype)
    if dt.is_bytes:
        data: Any = serialize_bytes(array)
        return Staged(name, dt.name, tuple(array.shape), data, len(data))
    contiguous = np.ascontiguousarray(array)
    return Staged(name, dt.name, tuple(array.shape), contiguous, contiguous.nbytes)


def layout(staged: Iterable[Staged], start: int = 0) -> tuple[list[int], int]:
    """Aligned offsets for the tensors from ``start``, and the end of the last one."""
    offsets: list[int] = []
    pos = align(start)
    for item in staged:
        offsets.append(pos)
        pos = align(pos + item.nbytes)
    return offsets, pos


def write(arena: Arena, item: Staged, offset: int) -> TensorRef:
    """Copy one staged tensor into the arena at ``offset`` (one memcpy)."""
    end = offset + item.nbytes
    if end > arena.size:
        raise OverloadedError(
            f"tensor '{item.name}' ({human_bytes(item.nbytes)}) does not fit in the "
            f"{human_bytes(arena.size)} shared-memory arena at offset {offset}"
        )
    if isinstance(item.data, bytes):
        arena.buffer[offset:end] = item.data
    elif item.nbytes:
        target = np.frombuffer(arena.buffer, dtype=np.uint8, count=item.nbytes, offset=offset)
        target[:] = item.data.reshape(-1).view(np.uint8)
    return TensorRef(item.name, item.datatype, item.shape, offset, item.nbytes)


def empty(ref: TensorRef) -> Array:
    """The zero-element tensor ``ref`` describes (no bytes: it needs no arena)."""
    dt = datatypes.from_name(ref.datatype)
    if ref.nbytes or 0 not in ref.shape:
        raise InvalidInputError(
            f"tensor '{ref.name}' of shape {list(ref.shape)} has {ref.nbytes} bytes but no "
            "place in the shared-memory arena"
        )
    return np.empty(ref.shape, dtype=np.object_ if dt.is_bytes else dt.dtype)


def read_any(arena: Arena | None, ref: TensorRef, *, copy: bool) -> Array:
    """:func:`read`, or :func:`empty` for a zero-byte tensor (which may come without an arena:
    a sender with only empty tensors to send is never granted one)."""
    if ref.nbytes == 0:
        return empty(ref)
    if arena is None:
        raise InvalidInputError(f"tensor '{ref.name}' came without a shared-memory arena")
    return read(arena, ref, copy=copy)


def locate(arena: Arena, name: str, array: Array, start: int, end: int) -> TensorRef | None:
    """``array``'s place if it is a C-contiguous view of ``arena`` lying within
    ``[start, end)``, so it can be handed over without a copy; else None."""
    if array.dtype.kind in "OSUV" or not array.flags.c_contiguous or array.nbytes == 0:
        return None
    offset = int(array.__array_interface__["data"][0]) - arena.address
    if offset < start or offset + array.nbytes > end:
        return None
    dt = datatypes.from_dtype(array.dtype)
    return TensorRef(name, dt.name, tuple(array.shape), offset, int(array.nbytes))


def read(arena: Arena, ref: TensorRef, *, copy: bool) -> Array:
    """The tensor ``ref`` points at: a view of the arena (``copy=False``) or a private copy.

    BYTES tensors are always rebuilt as ``bytes`` objects (a copy by nature).
    """
    dt = datatypes.from_name(ref.datatype)
    if ref.offset < 0 or ref.offset + ref.nbytes > arena.size:
        raise InvalidInputError(
            f"tensor '{ref.name}' lies outside the {human_bytes(arena.size)} shared-memory arena"
        )
    count = 1
    for d in ref.shape:
        count *= d
    if dt.is_bytes:
        region = arena.buffer[ref.offset : ref.offset + ref.nbytes]
        try:
            return deserialize_bytes(region, count, f"tensor '{ref.name}'").reshape(ref.shape)
        finally:
            region.release()
    expected = count * dt.itemsize
    if expected != ref.nbytes:
        raise InvalidInputError(
            f"tensor '{ref.name}' has {ref.nbytes} bytes but shape {list(ref.shape)} of "
            f"{ref.datatype} needs {expected}"
        )
    view = np.frombuffer(arena.buffer, dtype=dt.dtype, count=count, offset=ref.offset)
    view = view.reshape(ref.shape)
    return view.copy() if copy else view


# -- sizing --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArenaPolicy:
    """How big an arena starts and how far it may grow.

    ``max_bytes`` 0 means: bounded only by the free space of ``/dev/shm`` (a share of it,
    :data:`FREE_SPACE_SHARE`, measured when the arena grows).
    """

    initial_bytes: int = DEFAULT_INITIAL_BYTES
    max_bytes: int = 0
    directory: Path = SHM_DIR

    def limit(self, current: int) -> int:
        """The largest arena allowed now (the current one is counted as available)."""
        by_memory = current + int(shm_free_bytes(self.directory) * FREE_SPACE_SHARE)
        return min(by_memory, self.max_bytes) if self.max_bytes else by_memory

    def next_size(self, current: int, needed: int) -> int:
        """Double until ``needed`` fits (whole MiB), capped by :meth:`limit`.

        Raises :class:`OverloadedError` naming both sizes when ``needed`` is over the limit.
        """
        limit = self.limit(current)
        if needed > limit:
            raise OverloadedError(
                f"the batch needs {human_bytes(needed)} of shared memory but the arena may grow "
                f"to at most {human_bytes(limit)} (free space of {self.directory} and the "
                "model's 'shm-max-byte-size' parameter); send smaller requests or batches"
            )
        size = max(current, 1 << 20)
        while size < needed:
            size *= 2
        return min(size, max(limit, needed))
