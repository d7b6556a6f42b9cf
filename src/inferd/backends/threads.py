"""How many runtime threads an instance gets, so a model's instances share the cores."""

from __future__ import annotations

import os

from inferd.core.model_spec import ModelSpec


def available_cores() -> int:
    """The cores this process may run on (CPU affinity where the platform tells)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_intra_op_threads(spec: ModelSpec, cores: int | None = None) -> int:
    """Share the cores among the model's instances so they never oversubscribe the machine.

    One instance on a 2-core machine gets 2 threads; two instances get one thread each.
    """
    available = cores if cores is not None else available_cores()
    instances = sum(g.count for g in spec.instance_groups) or 1
    return max(1, available // instances)
