"""The registry of client shared-memory regions, shared by the HTTP and gRPC front ends.

A client creates a POSIX shared-memory object (``/dev/shm/<key>``), writes its inputs there and
registers a window of it (key, offset, byte size) under a region name. Requests then name the
region instead of carrying tensor data; outputs can be written into a region too.

What the server does with a key, and nothing more:

* the key is a file name inside the shared-memory folder (leading ``/`` removed, as
  ``shm_open`` does): no other ``/``, no ``..``, no NUL, and not one of the server's own
  segments (reserved prefixes);
* the file is opened ``O_RDWR | O_NOFOLLOW`` (never created, never truncated, never unlinked;
  symbolic links are refused) and must be a regular file of the shared-memory file system;
* the window is mapped read/write (``MAP_SHARED``); it is unmapped on unregister and when the
  server stops. A request still reading or writing a region keeps its mapping alive until it
  ends (the views hold it), so unregistering never pulls memory from under a request.

Before each use the file's current size is checked again, so a client that shrinks its object
after registering gets an error instead of crashing the server with ``SIGBUS``.

CUDA shared memory answers as a server without GPUs does: nothing is registered, status is
empty, unregister succeeds and register is refused.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from inferd.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedError,
)

__all__ = ["SHARED_MEMORY_EXTENSIONS", "SHM_DIR", "RegionStatus", "SharedMemoryRegistry"]

#: Where POSIX shared-memory objects live on Linux.
SHM_DIR = Path("/dev/shm")
#: What server metadata lists while the extension is on.
SHARED_MEMORY_EXTENSIONS = ("system_shared_memory", "cuda_shared_memory")

_GRANULARITY = mmap.ALLOCATIONGRANULARITY
_MAX_KEY = 255  # a file name


@dataclass(frozen=True, slots=True)
class RegionStatus:
    """One registered system shared-memory region, as the status endpoints report it."""

    name: str
    key: str
    offset: int
    byte_size: int


@dataclass(slots=True)
class _Region:
    status: RegionStatus
    mapping: mmap.mmap
    start: int  # where the registered window starts inside the mapping
    file_offset: int  # where the mapping starts inside the file

    def close(self) -> bool:
        """Unmap now; false when a request still holds a view (it unmaps when that ends)."""
        try:
            self.mapping.close()
        except BufferError:
            return False
        return True


class SharedMemoryRegistry:
    """Regions registered by clients, by name. Thread-safe (requests may be decoded on worker
    threads while the event loop registers or unregisters).

    ``enabled=False`` makes every operation fail with a message naming the flag that turns the
    extension on; ``reserved_prefixes`` are key prefixes of the server's own segments.
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        directory: Path = SHM_DIR,
        reserved_prefixes: tuple[str, ...] = (),
        log: logging.Logger | None = None,
    ) -> None:
        self._enabled = enabled
        self._directory = directory
        self._reserved = reserved_prefixes
        self._log = log if log is not None else logging.getLogger("inferd.shared_memory")
        self._regions: dict[str, _Region] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._enabled

    def check_enabled(self) -> None:
        """Raise :class:`UnsupportedError` naming the flag that turns the extension on, unless
        it is on (every operation below checks it first)."""
        if not self._enabled:
            raise UnsupportedError(
                "shared memory is disabled on this server (start it with "
                "--allow-shared-memory=true to enable it); send tensor data in the request "
                "instead"
            )

    # -- system shared memory -----------------------------------------------------------------

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the object ``key`` as region ``name``."""
        self.check_enabled()
        if not name:
            raise InvalidArgumentError(
                "'region name' is necessary to register system shared memory region"
            )
        what = f"failed to register shared memory region '{name}'"
        with self._lock:
            if name in self._regions:
                raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
        file_name = self._file_name(key, what)
        if offset < 0 or byte_size < 0:
            raise InvalidArgumentError(f"{what}: offset and byte_size must not be negative")
        if byte_size == 0:
            raise InvalidArgumentError(f"{what}: byte_size must be greater than 0")
        region = self._map(name, key, file_name, offset, byte_size, what)
        with self._lock:
            if name in self._regions:  # registered meanwhile by another thread
                region.close()
                raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
            self._regions[name] = region
        self._log.debug("registered shared memory region '%s' (%s)", name, region.status)

    def _file_name(self, key: str, what: str) -> str:
        file_name = key.lstrip("/")
        if (
            not file_name
            or "/" in file_name
            or "\x00" in file_name
            or file_name in (".", "..")
            or len(file_name) > _MAX_KEY
        ):
            raise InvalidArgumentError(
                f"{what}: invalid key {key!r}: a shared memory key is one name such as "
                "'/input_data' (a file of the shared memory folder), without other '/'"
            )
        if any(file_name.startswith(prefix) for prefix in self._reserved):
            raise InvalidArgumentError(
                f"{what}: key '{key}' names a shared memory object that the server itself uses"
            )
        return file_name

    def _map(
        self, name: str, key: str, file_name: str, offset: int, byte_size: int, what: str
    ) -> _Region:
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self._directory / file_name, flags)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise InvalidArgumentError(
                f"Unable to open shared memory region: '{key}' ({reason})"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_dev != self._directory.stat().st_dev:
                raise InvalidArgumentError(
                    f"{what}: '{key}' is not a shared memory object of {self._directory}"
                )
            if offset + byte_size > info.st_size:
                raise InvalidArgumentError(
                    f"{what}: invalid args: offset {offset} + byte_size {byte_size} goes beyond "
                    f"the {info.st_size} bytes of '{key}'"
                )
            file_offset = offset - offset % _GRANULARITY
            start = offset - file_offset
            try:
                mapping = mmap.mmap(
                    fd,
                    start + byte_size,
                    flags=mmap.MAP_SHARED,
                    prot=mmap.PROT_READ | mmap.PROT_WRITE,
                    offset=file_offset,
                )
            except OSError as exc:
                raise InvalidArgumentError(
                    f"{what}: unable to map it: {exc.strerror or exc}"
                ) from None
        finally:
            os.close(fd)
        return _Region(RegionStatus(name, key, offset, byte_size), mapping, start, file_offset)

    def unregister(self, name: str = "") -> None:
        """Unmap region ``name``, or every region when ``name`` is empty. An unknown name is
        not an error (clients unregister before they register)."""
        self.check_enabled()
        with self._lock:
            if name:
                region = self._regions.pop(name, None)
                gone = [] if region is None else [region]
            else:
                gone = list(self._regions.values())
                self._regions.clear()
        for region in gone:
            if not region.close():
                self._log.debug(
                    "shared memory region '%s' is unmapped once its in-flight requests end",
                    region.status.name,
                )

    def status(self, name: str = "") -> list[RegionStatus]:
        """Every region, or only ``name`` (unknown: :class:`NotFoundError`)."""
        self.check_enabled()
        with self._lock:
            if not name:
                return [region.status for region in self._regions.values()]
            region = self._regions.get(name)
        if region is None:
            raise NotFoundError(f"Unable to find system shared memory region: '{name}'")
        return [region.status]

    def window(self, region: str, offset: int, byte_size: int, *, writable: bool) -> memoryview:
        """``byte_size`` bytes at ``offset`` of a registered region (offsets are relative to
        the registered window), read-only unless ``writable``."""
        self.check_enabled()
        with self._lock:
            found = self._regions.get(region)
        if found is None:
            raise InvalidArgumentError(f"Unable to find shared memory region: '{region}'")
        size = found.status.byte_size
        if offset >= size:
            raise InvalidArgumentError(
                f"Invalid offset for shared memory region: '{region}': offset {offset} is not "
                f"inside its {size} bytes"
            )
        if offset + byte_size > size:
            raise InvalidArgumentError(
                f"Invalid offset + byte size for shared memory region: '{region}': "
                f"{offset} + {byte_size} goes beyond its {size} bytes"
            )
        start = found.start + offset
        try:
            file_size = found.mapping.size()
            view = memoryview(found.mapping)[start : start + byte_size]
        except (ValueError, OSError):  # unregistered meanwhile: the mapping is closed
            raise InvalidArgumentError(f"Unable to find shared memory region: '{region}'") from None
        if found.file_offset + start + byte_size > file_size:
            view.release()
            raise InvalidArgumentError(
                f"shared memory region '{region}' is no longer usable: its object "
                f"'{found.status.key}' was shrunk to {file_size} bytes after it was registered"
            )
        return view if writable else view.toreadonly()

    # -- CUDA shared memory: a server without GPUs ---------------------------------------------

    def cuda_register(self, name: str) -> None:
        """Always refused: this server has no GPUs."""
        self.check_enabled()
        if not name:
            raise InvalidArgumentError(
                "'region name' is necessary to register cuda shared memory region"
            )
        raise InvalidArgumentError(
            f"failed to register CUDA shared memory region: '{name}', GPUs not supported"
        )

    def cuda_unregister(self, name: str = "") -> None:
        """Nothing can be registered, so there is nothing to unregister: success."""
        self.check_enabled()

    def cuda_status(self, name: str = "") -> list[RegionStatus]:
        """Empty; a name is unknown (or a system region, which the message says)."""
        self.check_enabled()
        if not name:
            return []
        with self._lock:
            system = name in self._regions
        if system:
            raise InvalidArgumentError(
                f"The region named '{name}' is registered as system shared memory, not CUDA "
                "shared memory"
            )
        raise NotFoundError(f"Unable to find cuda shared memory region: '{name}'")

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Unmap every region (the server is stopping); works even when disabled."""
        with self._lock:
            gone = list(self._regions.values())
            self._regions.clear()
        for region in gone:
            with contextlib.suppress(Exception):
                region.close()
