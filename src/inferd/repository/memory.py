"""Memory accounting for on-demand models: the budget, container limits, resident sets.

- :func:`parse_budget` reads ``--model-memory-budget``: bytes with an optional unit
  (``2GiB``, ``512MiB``, ``1.5G``, ``800000000``) or a share of the container's memory limit
  (``60%``);
- :func:`parse_cgroup_v2` / :func:`parse_cgroup_v1` are pure parsers of the cgroup files that
  hold that limit; :func:`container_limit` finds and reads them;
- :func:`process_tree_rss` is the resident set of this process and its worker processes (the
  Python backend's); :class:`ProcessTree` measures it often, scanning for the workers only
  when a process may have started;
- :class:`GrowthShares` splits the resident set's growth among loads that run at the same
  time, so each model's measured size is its own share;
- :class:`PeakMeter` reads how far the process's resident set rose above where it is now since
  its last reset (Linux's ``VmHWM``, reset through ``/proc/self/clear_refs``): a load's
  transient peak (the file read, the session built, the warm-up's buffers);
- :func:`folder_bytes` is a model folder's size on disk, the estimate of a model never loaded.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from inferd.errors import InvalidArgumentError

_log = logging.getLogger("inferd.repository")

__all__ = [
    "GrowthShares",
    "MemoryBudget",
    "PeakMeter",
    "ProcessTree",
    "container_limit",
    "folder_bytes",
    "limit_malloc_arenas",
    "machine_bytes",
    "parse_budget",
    "parse_cgroup_v1",
    "parse_cgroup_v2",
    "parse_last_pid",
    "parse_size",
    "parse_stat_ppid",
    "parse_status_kib",
    "process_tree_rss",
    "release_free_memory",
    "resolve_budget",
]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
# cgroup v1 writes "no limit" as the largest page-aligned int64; anything this big is no limit
_V1_UNLIMITED = 2**60


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    """``--model-memory-budget``: a number of bytes, or a share (0 < share <= 1) of the
    container's memory limit (the machine's memory where no limit is set)."""

    bytes: int | None = None
    share: float | None = None

    def __str__(self) -> str:
        return f"{self.share * 100:g}%" if self.share is not None else f"{self.bytes} bytes"


def parse_size(text: str, what: str = "--model-memory-budget") -> int:
    """``2GiB`` -> 2147483648; decimal (k, M, G, T) and binary (KiB, MiB, GiB, TiB) units."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise InvalidArgumentError(
            f"{what} '{text}' is not a size: give bytes with an optional unit "
            "(e.g. 2GiB, 512MiB, 1.5G) or a share of the container's memory (e.g. 60%)"
        )
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise InvalidArgumentError(f"{what} '{text}' must be more than 0 bytes")
    return value


def parse_budget(text: str) -> MemoryBudget:
    """A size (:func:`parse_size`) or a percentage in (0, 100]."""
    stripped = text.strip()
    if stripped.endswith("%"):
        try:
            percent = float(stripped[:-1])
        except ValueError:
            percent = -1.0
        if not 0 < percent <= 100:
            raise InvalidArgumentError(
                f"--model-memory-budget '{text}': a share of the container's memory must be "
                "more than 0% and at most 100%"
            )
        return MemoryBudget(share=percent / 100)
    return MemoryBudget(bytes=parse_size(stripped))


def parse_cgroup_v2(text: str) -> int | None:
    """The contents of a cgroup v2 ``memory.max``: bytes, or None for ``max`` (no limit)."""
    value = text.strip()
    if value == "max":
        return None
    if not value.isdigit():
        raise ValueError(f"unexpected memory.max contents: {value!r}")
    return int(value)


def parse_cgroup_v1(text: str) -> int | None:
    """The contents of a cgroup v1 ``memory.limit_in_bytes``: bytes, or None for no limit
    (v1 writes it as a huge page-aligned number)."""
    value = text.strip()
    if not value.lstrip("-").isdigit():
        raise ValueError(f"unexpected memory.limit_in_bytes contents: {value!r}")
    number = int(value)
    return None if number < 0 or number >= _V1_UNLIMITED else number


def _own_cgroup_paths(proc_cgroup: str) -> tuple[str | None, str | None]:
    """This process's cgroup v2 path and v1 memory-controller path, from /proc/self/cgroup."""
    v2 = v1 = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def container_limit(
    root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")
) -> int | None:
    """The memory limit of this process's container (cgroup v2, else v1), None if none."""
    try:
        v2, v1 = _own_cgroup_paths(proc_cgroup.read_text())
    except OSError:
        v2 = v1 = None
    candidates: list[tuple[Path, bool]] = []
    if v2 is not None:
        candidates.append((root / v2.lstrip("/") / "memory.max", True))
    candidates.append((root / "memory.max", True))
    if v1 is not None:
        candidates.append((root / "memory" / v1.lstrip("/") / "memory.limit_in_bytes", False))
    candidates.append((root / "memory" / "memory.limit_in_bytes", False))
    for path, is_v2 in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        try:
            return parse_cgroup_v2(text) if is_v2 else parse_cgroup_v1(text)
        except ValueError as exc:
            _log.warning("%s: %s", path, exc)
    return None


def resolve_budget(budget: MemoryBudget, limit: int | None, machine_bytes: int) -> int:
    """The budget in bytes: a share of ``limit`` (the machine's memory when None)."""
    if budget.bytes is not None:
        return budget.bytes
    assert budget.share is not None
    return int((limit if limit is not None else machine_bytes) * budget.share)


def machine_bytes() -> int:
    """The machine's physical memory."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def parse_stat_ppid(stat: str) -> int:
    """The parent pid in a ``/proc/<pid>/stat`` line (the command may hold spaces and
    parentheses: the fields after the last ``)`` are fixed)."""
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _descendants(pid: int, proc: Path) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = parse_stat_ppid((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
        parents.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        out.extend(children)
        todo.extend(children)
    return out


def process_tree_rss(pid: int | None = None, proc: Path = Path("/proc")) -> int:
    """The resident set of the process and of all its descendants (the Python backend's
    worker processes), in bytes, read from ``/proc``."""
    root = pid if pid is not None else os.getpid()
    return _rss_of([root, *_descendants(root, proc)], proc)


def _rss_of(pids: list[int], proc: Path) -> int:
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for one in pids:
        try:
            total += int((proc / str(one) / "statm").read_text().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue  # a worker that exited meanwhile
    return total


def parse_last_pid(loadavg: str) -> int:
    """The most recently created pid in a ``/proc/loadavg`` text (its fifth field)."""
    return int(loadavg.split()[4])


class ProcessTree:
    """:func:`process_tree_rss` for a caller that measures often (the on-demand loader: before
    and after every load and unload, at each room decision). Finding the descendants reads
    every process's ``stat`` (1.4 ms with 64 processes on an idle machine; on a busy 2-core
    server measuring about 200 times a second, a seventh of its CPU samples). Here that scan
    runs again only when a process or thread was created anywhere since the last one (the last
    pid in ``/proc/loadavg`` moved); otherwise only the known processes' ``statm`` are read. A
    process that exits drops out (its ``statm`` is gone); a new one always moves the last pid."""

    def __init__(self, pid: int | None = None, proc: Path = Path("/proc")) -> None:
        self._root = pid if pid is not None else os.getpid()
        self._proc = proc
        self._last: int | None = None
        self._tree = [self._root]
        self.scans = 0

    def rss(self) -> int:
        try:
            last: int | None = parse_last_pid((self._proc / "loadavg").read_text())
        except (OSError, ValueError, IndexError):
            last = None  # not known: scan every time
        if last is None or last != self._last:
            # read before the scan: a process created during it moves the last pid again
            self._tree = [self._root, *_descendants(self._root, self._proc)]
            self._last = last
            self.scans += 1
        return _rss_of(self._tree, self._proc)


#: glibc's ``mallopt`` parameter for the most malloc arenas (``M_ARENA_MAX``)
_M_ARENA_MAX = -8


def limit_malloc_arenas(count: int) -> bool:
    """Cap glibc's malloc arenas at ``count`` (``mallopt(M_ARENA_MAX)``) unless the operator
    set ``MALLOC_ARENA_MAX``; whether the cap was set (False: set by the operator, or not
    glibc).

    By default glibc gives threads up to eight arenas per core; memory a model freed in one
    thread's arena stays resident there, apart from the others', and the trim after an
    unload cannot give back what other live allocations pin. Under a memory budget, every
    byte held that way is room a model does not get (``bench/many_models_mixed.py`` measured
    the hit ratio, 2 runs each alternating in one sitting: 0.768 and 0.803 with the default,
    0.818 and 0.811 with two arenas on two cores)."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_ARENA_MAX, max(1, count)))


def release_free_memory() -> None:
    """Hand memory the allocator keeps after an unload back to the system (glibc's
    ``malloc_trim``), so the resident set follows what the models hold; a no-op elsewhere."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


@dataclass(slots=True)
class GrowthShares:
    """Splits the resident set's growth among the loads in flight, so that loads running at the
    same time each get their own share rather than all of it.

    Every change of the set of loads (a start, an end) comes with a measurement; the growth
    since the previous measurement is split among the loads in flight over that interval in
    proportion to their weights (their estimated sizes). A load that runs alone gets exactly
    the growth measured around it. :meth:`rebase` takes a measurement without sharing the
    change (an unload freed memory: that drop is nobody's load)."""

    last: int = 0
    weights: dict[str, int] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)

    def observe(self, rss: int) -> None:
        delta, self.last = rss - self.last, rss
        total = sum(self.weights.values())
        if total:
            for name, weight in self.weights.items():
                self.shares[name] += delta * weight / total

    def begin(self, name: str, weight: int, rss: int) -> None:
        self.observe(rss)
        self.weights[name] = max(1, weight)
        self.shares[name] = 0.0

    def end(self, name: str, rss: int) -> int:
        """The load's share of the growth, in bytes (never below 0)."""
        self.observe(rss)
        self.weights.pop(name, None)
        return max(0, round(self.shares.pop(name, 0.0)))

    def rebase(self, rss: int) -> None:
        self.last = rss

    def charge(self, name: str, rss: int) -> None:
        """The change since the previous measurement is ``name``'s alone (what trimming the
        allocator gave back at the end of its load: its own transient, not the others')."""
        delta, self.last = rss - self.last, rss
        if name in self.shares:
            self.shares[name] += delta


class PeakMeter:
    """How far the process's resident set rose, at its peak since :meth:`reset`, above what it
    was at the reset (a load's size plus what it held for a while and gave back). Memory
    others free meanwhile (a model unloaded a moment before, torn down late) lowers the
    resident set, not the peak, so it is not mistaken for the load's. Linux only: elsewhere,
    or where ``/proc/self/clear_refs`` cannot be written, :meth:`reset` says False and
    :meth:`rise` None."""

    def __init__(self, proc_self: Path = Path("/proc/self")) -> None:
        self._status = proc_self / "status"
        self._clear = proc_self / "clear_refs"
        self._start: int | None = None  # KiB, the resident set at the last reset

    def reset(self) -> bool:
        try:
            self._clear.write_text("5")  # 5: reset the peak resident set to the current one
            self._start = self._read()["VmRSS"]
        except (OSError, ValueError):
            self._start = None
            return False
        return True

    def rise(self) -> int | None:
        if self._start is None:
            return None
        try:
            peak = self._read()["VmHWM"]
        except (OSError, ValueError):
            return None
        return max(0, peak - self._start) * 1024

    def _read(self) -> dict[str, int]:
        return parse_status_kib(self._status.read_text(), ("VmHWM", "VmRSS"))


def parse_status_kib(status: str, keys: tuple[str, ...]) -> dict[str, int]:
    """The ``kB`` fields ``keys`` of a ``/proc/<pid>/status`` text (ValueError if one is
    missing)."""
    out: dict[str, int] = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in keys:
            out[key] = int(rest.split()[0])
    missing = [k for k in keys if k not in out]
    if missing:
        raise ValueError(f"no {', '.join(missing)} in the status text")
    return out


def folder_bytes(path: Path) -> int:
    """The size of the files under ``path`` (symbolic links not followed)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total
