"""Who else used the CPUs while a benchmark window ran.

On a 2-core machine one busy process elsewhere takes half the capacity, and a 2-thread ONNX
Runtime session, whose threads meet at a barrier after every operator, loses more than that.
:func:`watch` reads the machine-wide busy time (``/proc/stat``) and this process's own CPU time
(and those of the benchmark's own children and server) around a window, so every figure can
carry how many cores *other* processes took meanwhile, and the busiest of them by name. Linux
only; elsewhere the readings are ``None``.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
TICK_S = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def machine_busy_s() -> float | None:
    """CPU seconds spent by all CPUs outside idle and iowait since boot (steal included)."""
    try:
        fields = (PROC / "stat").read_text().split("\n", 1)[0].split()[1:9]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields)
    return (user + nice + system + irq + softirq + steal) * TICK_S


def _process_cpu() -> dict[int, tuple[str, int, float]]:
    """(name, process group, CPU seconds: user + system, threads included) by pid."""
    found: dict[int, tuple[str, int, float]] = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name = text[text.find("(") + 1 : text.rfind(")")]
        rest = text[text.rfind(")") + 2 :].split()
        found[int(entry.name)] = (name, int(rest[2]), (int(rest[11]) + int(rest[12])) * TICK_S)
    return found


@dataclass
class Share:
    """Filled in when the ``watch`` block ends."""

    wall_s: float = 0.0
    own_cores: float | None = None  # ours: see watch()
    others_cores: float | None = None  # everything else on the machine (and the hypervisor)
    busiest: list[str] = field(default_factory=list)  # "name[pid] 0.93" of the top others

    def summary(self) -> str:
        if self.others_cores is None:
            return "others: unknown"
        text = f"others {self.others_cores:.2f} cores"
        return text + (f" ({', '.join(self.busiest)})" if self.busiest else "")


def _own_s(groups: frozenset[int], table: dict[int, tuple[str, int, float]]) -> float:
    """This process, its waited-for children, and the processes in ``groups``."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    others = sum(cpu for _, group, cpu in table.values() if group in groups)
    return time.process_time() + children.ru_utime + children.ru_stime + others


@contextmanager
def watch(groups: frozenset[int] = frozenset(), threshold_cores: float = 0.1) -> Iterator[Share]:
    """Measure the CPU that other processes use during the block (cores = CPU s / wall s).

    "Ours" is this process, the children it waited for (a load generator run to its end) and
    every process in the process ``groups`` (a server started in its own session). The other
    processes that took more than ``threshold_cores`` are named.
    """
    share = Share()
    before = _process_cpu()
    busy0, own0, t0 = machine_busy_s(), _own_s(groups, before), time.perf_counter()
    yield share
    t1 = time.perf_counter()
    after = _process_cpu()
    busy1, own1 = machine_busy_s(), _own_s(groups, after)
    share.wall_s = t1 - t0
    if share.wall_s <= 0 or busy0 is None or busy1 is None:
        return
    share.own_cores = (own1 - own0) / share.wall_s
    share.others_cores = max(0.0, (busy1 - busy0) / share.wall_s - share.own_cores)
    if share.others_cores <= threshold_cores:
        return
    me, mine = os.getpid(), {*groups, os.getpgid(0)}
    used = sorted(
        ((after[pid][2] - cpu) / share.wall_s, f"{name}[{pid}]")
        for pid, (name, group, cpu) in before.items()
        if pid != me and group not in mine and pid in after
    )
    top = [(cores, who) for cores, who in used[::-1][:3] if cores >= threshold_cores]
    share.busiest = [f"{who} {cores:.2f}" for cores, who in top]


class QuietGate:
    """Waits, before a measurement, until other processes leave the CPUs (below ``cores`` over
    a ``probe_s`` probe), at most ``max_wait_s`` each time and ``budget_s`` in all."""

    def __init__(
        self, budget_s: float, max_wait_s: float = 15.0, cores: float = 0.25, probe_s: float = 0.5
    ) -> None:
        self.budget_s = budget_s
        self.max_wait_s = max_wait_s
        self.cores = cores
        self.probe_s = probe_s

    def wait(self) -> float:
        """Seconds waited (0 when already quiet or out of budget)."""
        t0 = time.perf_counter()
        limit = min(self.max_wait_s, self.budget_s)
        while time.perf_counter() - t0 < limit:
            with watch(threshold_cores=float("inf")) as share:
                time.sleep(self.probe_s)
            if share.others_cores is None or share.others_cores < self.cores:
                break
        waited = time.perf_counter() - t0
        self.budget_s = max(0.0, self.budget_s - waited)
        return waited if waited > self.probe_s else 0.0
