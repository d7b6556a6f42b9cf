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
* the descriptor is kept while the region is registered; it is closed on unregister (once the
  reads and writes in progress on it end) and when the server stops.

The server never maps a client's object. The client owns its size: it can truncate the object
at any moment, and touching a mapped page past the end of a file is ``SIGBUS``, which no size
check beforehand can rule out (the client may truncate between the check and the access). So
inputs are copied out with ``preadv`` into a fresh buffer the request owns, and outputs are
written with ``pwrite``: a read that comes back short means the object shrank, and the request
gets a 400 naming the region instead of the server dying.

Registrations are bounded: at most ``max_regions`` regions (each holds a file descriptor) and
``max_bytes`` bytes registered in all; past either bound a registration is refused with a
message naming the flag to raise.

CUDA shared memory answers as a server without GPUs does: nothing is registered, status is
empty, unregister succeeds and register is refused.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferd.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedError,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_REGIONS",
    "SHARED_MEMORY_EXTENSIONS",
    "SHM_DIR",
    "RegionStatus",
    "SharedMemoryRegistry",
    "descriptor_shortfall",
]

#: Where POSIX shared-memory objects live on Linux.
SHM_DIR = Path("/dev/shm")
#: What server metadata lists while the extension is on.
SHARED_MEMORY_EXTENSIONS = ("system_shared_memory", "cuda_shared_memory")
#: Regions registered at once unless the operator says otherwise (each keeps a descriptor).
DEFAULT_MAX_REGIONS = 1024
#: Bytes registered in all unless the operator says otherwise.
DEFAULT_MAX_BYTES = 4 << 30

_MAX_KEY = 255  # a file name
_CHUNK = 1 << 30  # Linux moves at most 2 GiB - 4 KiB in one read or write call
_SPARE_DESCRIPTORS = 1024  # sockets, model files, logs: what the server needs besides regions


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
    fd: int
    users: int = 0  # reads and writes in progress; both fields change under the registry lock
    closed: bool = False  # unregistered: the descriptor is closed when the last user ends


def descriptor_shortfall(max_regions: int) -> str | None:
    """A warning when ``max_regions`` regions and the server's other descriptors may not fit
    this process's open-file limit (``ulimit -n``), else ``None``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or max_regions + _SPARE_DESCRIPTORS <= soft:
        return None
    return (
        f"--shared-memory-max-regions {max_regions} and the server's own descriptors may not "
        f"fit this process's open-file limit ({soft}, ulimit -n): raise the limit to at least "
        f"{max_regions + _SPARE_DESCRIPTORS} or lower --shared-memory-max-regions"
    )


class SharedMemoryRegistry:
    """Regions registered by clients, by name. Thread-safe (requests may be decoded on worker
    threads while the event loop registers or unregisters).

    ``enabled=False`` makes every operation fail with a message naming the flag that turns the
    extension on; ``reserved_prefixes`` are key prefixes of the server's own segments;
    ``max_regions`` and ``max_bytes`` bound what may be registered at once.
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        directory: Path = SHM_DIR,
        reserved_prefixes: tuple[str, ...] = (),
        max_regions: int = DEFAULT_MAX_REGIONS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        log: logging.Logger | None = None,
    ) -> None:
        if max_regions < 1 or max_bytes < 1:
            raise ValueError("max_regions and max_bytes must be >= 1")
        self._enabled = enabled
        self._directory = directory
        self._reserved = reserved_prefixes
        self._max_regions = max_regions
        self._max_bytes = max_bytes
        self._log = log if log is not None else logging.getLogger("inferd.shared_memory")
        self._regions: dict[str, _Region] = {}
        self._registered_bytes = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._enabled

    def check_enabled(self) -> None:
        """Raise :class:`UnsupportedError` naming the flag that turns the extension on, unless
        it is on (every operation below checks it first, except the status queries: as in
        Triton, those answer for a server with no region while the extension is off)."""
        if not self._enabled:
            raise UnsupportedError(
                "shared memory is disabled on this server (start it with "
                "--allow-shared-memory=true to enable it); send tensor data in the request "
                "instead"
            )

    # -- system shared memory -----------------------------------------------------------------

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register ``byte_size`` bytes at ``offset`` of the object ``key`` as region ``name``."""
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
        with self._lock:
            self._check_bounds(byte_size, what)  # before opening anything
        region = self._open(name, key, file_name, offset, byte_size, what)
        try:
            with self._lock:
                if name in self._regions:  # registered meanwhile by another thread
                    raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
                self._check_bounds(byte_size, what)
                self._regions[name] = region
                self._registered_bytes += byte_size
        except Exception:
            os.close(region.fd)
            raise
        self._log.debug("registered shared memory region '%s' (%s)", name, region.status)

    def _check_bounds(self, byte_size: int, what: str) -> None:
        """Refuse a registration past either bound (called under the lock)."""
        if len(self._regions) >= self._max_regions:
            raise InvalidArgumentError(
                f"{what}: this server already has {len(self._regions)} shared memory regions "
                f"registered, the most that --shared-memory-max-regions {self._max_regions} "
                "allows; unregister regions that are no longer used, or start the server with a "
                "larger --shared-memory-max-regions"
            )
        total = self._registered_bytes + byte_size
        if total > self._max_bytes:
            raise InvalidArgumentError(
                f"{what}: its {byte_size} bytes would bring the shared memory registered on this "
                f"server to {total} bytes, beyond --shared-memory-max-bytes {self._max_bytes}; "
                "unregister regions that are no longer used, or start the server with a larger "
                "--shared-memory-max-bytes"
            )

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

    def _open(
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
        except BaseException:
            os.close(fd)
            raise
        return _Region(RegionStatus(name, key, offset, byte_size), fd)

    def unregister(self, name: str = "") -> None:
        """Forget region ``name``, or every region when ``name`` is empty. An unknown name is
        not an error (clients unregister before they register). A descriptor still being read
        or written by a request is closed when that ends."""
        self.check_enabled()
        with self._lock:
            if name:
                region = self._regions.pop(name, None)
                gone = [] if region is None else [region]
            else:
                gone = list(self._regions.values())
                self._regions.clear()
            to_close = self._retire(gone)
        for fd in to_close:
            os.close(fd)

    def _retire(self, regions: list[_Region]) -> list[int]:
        """Mark ``regions`` (removed from the table) closed; the descriptors nobody is using
        now, for the caller to close once it has left the lock (called under the lock)."""
        to_close: list[int] = []
        for region in regions:
            region.closed = True
            self._registered_bytes -= region.status.byte_size
            if region.users == 0:
                to_close.append(region.fd)
            else:
                self._log.debug(
                    "shared memory region '%s' is closed once its in-flight requests end",
                    region.status.name,
                )
        return to_close

    def status(self, name: str = "") -> list[RegionStatus]:
        """Every region, or only ``name`` (unknown: :class:`NotFoundError`). While the
        extension is off there is no region: ``[]``, as Triton answers."""
        with self._lock:
            if not name:
                return [region.status for region in self._regions.values()]
            region = self._regions.get(name)
        if region is None:
            raise NotFoundError(f"Unable to find system shared memory region: '{name}'")
        return [region.status]

    # -- reading and writing tensors ------------------------------------------------------------

    def read(self, region: str, offset: int, byte_size: int) -> memoryview:
        """A copy of ``byte_size`` bytes at ``offset`` of a registered region (offsets are
        relative to the registered window), in a fresh writable buffer the caller owns."""
        self.check_enabled()
        found = self._find(region)
        self._check_window(found.status, offset, byte_size)
        buffer = np.empty(byte_size, dtype=np.uint8).data
        self._enter(found)
        try:
            position = found.status.offset + offset
            done = 0
            while done < byte_size:
                try:
                    count = os.preadv(found.fd, [buffer[done : done + _CHUNK]], position + done)
                except OSError as exc:
                    raise self._failed(found, "read", exc) from None
                if count == 0:  # the end of the object: the client shrank it
                    raise self._shrunk(found, position + done, position + byte_size)
                done += count
        finally:
            self._leave(found)
        return buffer

    def writer(self, region: str, offset: int, byte_size: int) -> Callable[[memoryview], None]:
        """Check a window of a registered region for an output now; return the function that
        writes that output's bytes at the window's start when the response is encoded. A
        region unregistered (or registered anew) in between is refused then."""
        self.check_enabled()
        found = self._find(region)
        self._check_window(found.status, offset, byte_size)

        def write(data: memoryview) -> None:
            self._write(found, offset, data)

        return write

    def _write(self, found: _Region, offset: int, data: memoryview) -> None:
        if len(data) > found.status.byte_size - offset:
            raise InvalidArgumentError(
                f"{len(data)} bytes do not fit at offset {offset} of shared memory region "
                f"'{found.status.name}'"
            )
        self._enter(found)
        try:
            position = found.status.offset + offset
            end = position + len(data)
            try:
                size = os.fstat(found.fd).st_size
            except OSError as exc:
                raise self._failed(found, "write", exc) from None
            if size < end:  # writing would grow the object again, behind the client's back
                raise self._shrunk(found, size, end)
            done = 0
            while done < len(data):
                try:
                    count = os.pwrite(found.fd, data[done : done + _CHUNK], position + done)
                except OSError as exc:
                    raise self._failed(found, "write", exc) from None
                if count == 0:
                    raise self._failed(found, "write", None)
                done += count
        finally:
            self._leave(found)

    def _find(self, region: str) -> _Region:
        with self._lock:
            found = self._regions.get(region)
        if found is None:
            raise InvalidArgumentError(f"Unable to find shared memory region: '{region}'")
        return found

    @staticmethod
    def _check_window(status: RegionStatus, offset: int, byte_size: int) -> None:
        size = status.byte_size
        if offset >= size:
            raise InvalidArgumentError(
                f"Invalid offset for shared memory region: '{status.name}': offset {offset} is "
                f"not inside its {size} bytes"
            )
        if offset + byte_size > size:
            raise InvalidArgumentError(
                f"Invalid offset + byte size for shared memory region: '{status.name}': "
                f"{offset} + {byte_size} goes beyond its {size} bytes"
            )

    def _enter(self, found: _Region) -> None:
        """Count a read or write on ``found``; refused once it is unregistered (its descriptor
        may be closed already)."""
        with self._lock:
            if found.closed:
                raise InvalidArgumentError(
                    f"shared memory region '{found.status.name}' was unregistered while the "
                    "request was using it"
                )
            found.users += 1

    def _leave(self, found: _Region) -> None:
        with self._lock:
            found.users -= 1
            close = found.closed and found.users == 0
        if close:
            os.close(found.fd)

    @staticmethod
    def _shrunk(found: _Region, size: int, needed: int) -> InvalidArgumentError:
        status = found.status
        return InvalidArgumentError(
            f"shared memory region '{status.name}' is no longer usable: its object "
            f"'{status.key}' was shrunk to {size} bytes after it was registered, and this "
            f"request needs {needed} (offset {status.offset} + byte_size {status.byte_size} "
            "were registered); restore its size or register it again"
        )

    @staticmethod
    def _failed(found: _Region, verb: str, exc: OSError | None) -> InvalidArgumentError:
        reason = "nothing was written" if exc is None else (exc.strerror or str(exc))
        return InvalidArgumentError(
            f"unable to {verb} shared memory region '{found.status.name}' "
            f"(object '{found.status.key}'): {reason}"
        )

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
        """Empty; a name is unknown (or a system region, which the message says). Answered
        while the extension is off too, as Triton does."""
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
        """Forget every region and close its descriptor (the server is stopping; one still in
        use is closed when that use ends); works even when disabled."""
        with self._lock:
            gone = list(self._regions.values())
            self._regions.clear()
            to_close = self._retire(gone)
        for fd in to_close:
            with contextlib.suppress(OSError):
                os.close(fd)
