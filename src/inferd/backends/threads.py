"""How many runtime threads an instance gets, so a model's instances share the cores."""

from __future__ import annotations

import os
from pathlib import Path

from inferd.core.model_spec import ModelSpec

CGROUP_ROOT = Path("/sys/fs/cgroup")


def available_cores(cgroup_root: Path = CGROUP_ROOT) -> int:
    """The cores this process may use: its CPU affinity (where the platform tells), bounded by
    the CPU quota of its cgroup (a container's CPU limit), so a pod limited to 2 CPUs on a
    64-core node does not start 64 threads per model."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(cgroup_root)
    return min(cores, limit) if limit is not None else cores


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> int | None:
    """Whole CPUs the cgroup's quota allows (cgroup v2 ``cpu.max``, else v1
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), or None when there is no quota."""
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return cpu_limit(quota, period)
    for folder in ("cpu", "cpu,cpuacct"):
        quota_text = _read(root / folder / "cpu.cfs_quota_us")
        period_text = _read(root / folder / "cpu.cfs_period_us")
        if quota_text is not None and period_text is not None:
            return cpu_limit(quota_text, period_text)
    return None


def cpu_limit(quota: str, period: str) -> int | None:
    """A CFS quota and period (microseconds; quota ``max`` or negative: none) as whole CPUs,
    rounded down but at least one: threads beyond the quota only get throttled."""
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None  # "max" (v2) or text this reader does not know
    if quota_us <= 0 or period_us <= 0:
        return None
    return max(1, quota_us // period_us)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def default_intra_op_threads(spec: ModelSpec, cores: int | None = None) -> int:
    """Share the cores among the model's instances so they never oversubscribe the machine.

    One instance on a 2-core machine gets 2 threads; two instances get one thread each.
    """
    available = cores if cores is not None else available_cores()
    instances = sum(g.count for g in spec.instance_groups) or 1
    return max(1, available // instances)
