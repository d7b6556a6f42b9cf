"""What the load cost: the client's CPU, the server's CPU time and memory, and energy.

The server's CPU comes from ``/proc/<pid>/stat`` when its process id is known (``--server-pid``,
or the server runs in this process), else from its Prometheus ``process_cpu_seconds_total``
when the metrics URL answers; otherwise it is unknown. Energy comes from the RAPL counters
(``/sys/class/powercap/intel-rapl:*/energy_uj``) when the machine exposes them and they are
readable; otherwise the run says so.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")
_METRIC = r"^{}(?:\{{[^}}]*\}})?\s+([0-9.eE+-]+)\s*$"
_CPU_METRIC = re.compile(_METRIC.format("process_cpu_seconds_total").encode(), re.M)
_RSS_METRIC = re.compile(_METRIC.format("process_resident_memory_bytes").encode(), re.M)
NO_POWER_COUNTERS = "this machine does not expose power counters (no readable RAPL energy_uj)"


def client_cpu_s() -> float:
    """CPU time (user + system) this process used so far, all threads."""
    return time.process_time()


# -- /proc ------------------------------------------------------------------------------------


def parse_proc_stat(text: str, ticks_per_s: float) -> float:
    """utime + stime of a ``/proc/<pid>/stat`` line, in seconds."""
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    rest = text[text.rindex(")") + 2 :].split()
    utime, stime = int(rest[11]), int(rest[12])  # fields 14 and 15
    return (utime + stime) / ticks_per_s


def parse_rss_bytes(status_text: str) -> int | None:
    """VmRSS of a ``/proc/<pid>/status`` text, in bytes."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def proc_cpu_s(pid: int) -> float | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return None
    return parse_proc_stat(text, float(os.sysconf("SC_CLK_TCK")))


def proc_rss_bytes(pid: int) -> int | None:
    try:
        return parse_rss_bytes(Path(f"/proc/{pid}/status").read_text(encoding="ascii"))
    except OSError:
        return None


# -- Prometheus -------------------------------------------------------------------------------


def parse_cpu_metric(exposition: bytes) -> float | None:
    """``process_cpu_seconds_total`` from a Prometheus text exposition, if present."""
    match = _CPU_METRIC.search(exposition)
    return float(match.group(1)) if match else None


def parse_rss_metric(exposition: bytes) -> int | None:
    """``process_resident_memory_bytes`` from a Prometheus text exposition, if present."""
    match = _RSS_METRIC.search(exposition)
    return int(float(match.group(1))) if match else None


def _metrics_url(url: str) -> str:
    url = url if "://" in url else f"http://{url}"
    return url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"


def fetch_process_metrics(url: str, timeout_s: float = 2.0) -> tuple[float | None, int | None]:
    """The server's CPU seconds and resident bytes from its metrics endpoint (None: absent)."""
    try:
        with urllib.request.urlopen(_metrics_url(url), timeout=timeout_s) as answer:
            text = answer.read()
    except (OSError, ValueError):
        return None, None
    return parse_cpu_metric(text), parse_rss_metric(text)


def fetch_cpu_metric(url: str, timeout_s: float = 2.0) -> float | None:
    return fetch_process_metrics(url, timeout_s)[0]


# -- RAPL -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RaplZone:
    energy: Path
    max_range_uj: int


def rapl_zones(root: Path = POWERCAP) -> list[RaplZone]:
    """The package-level zones whose counter this process can read (none: no power counters)."""
    zones = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") != 1:  # sub-zones (core, uncore, dram) are inside the package
            continue
        energy = zone / "energy_uj"
        try:
            int(energy.read_text())
            max_range = int((zone / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            continue
        zones.append(RaplZone(energy, max_range))
    return zones


def read_energy_uj(zones: Sequence[RaplZone]) -> list[int] | None:
    try:
        return [int(z.energy.read_text()) for z in zones]
    except (OSError, ValueError):
        return None


def energy_delta_j(zones: Sequence[RaplZone], before: list[int], after: list[int]) -> float:
    """Joules used between two readings, counting a counter's wrap-around."""
    total = 0
    for zone, a, b in zip(zones, before, after, strict=True):
        total += b - a if b >= a else b + zone.max_range_uj - a
    return total / 1e6


# -- one probe for a run -------------------------------------------------------------------------


@dataclass(frozen=True)
class CostSample:
    client_cpu_s: float
    server_cpu_s: float | None
    server_rss_bytes: int | None
    energy_uj: list[int] | None


class CostProbe:
    """Takes :class:`CostSample` readings at window edges from the sources that answer."""

    def __init__(
        self,
        *,
        server_pid: int | None,
        metrics_url: str | None,
        in_process: bool,
        powercap: Path = POWERCAP,
        cpu_of_pid: Callable[[int], float | None] = proc_cpu_s,
    ) -> None:
        self._pid = os.getpid() if in_process and server_pid is None else server_pid
        self._in_process = in_process
        self._metrics_url = metrics_url
        self._cpu_of_pid = cpu_of_pid
        self.zones = rapl_zones(powercap)
        self.server_cpu_source = "unknown"
        self._use_metrics = False

    async def start(self) -> None:
        """Find which sources answer (before measuring; reading them later is cheap)."""
        if self._pid is not None and self._cpu_of_pid(self._pid) is not None:
            self.server_cpu_source = (
                "this process (server and load generator together)"
                if self._in_process
                else f"/proc/{self._pid}/stat"
            )
        elif self._metrics_url is not None:
            value = await asyncio.to_thread(fetch_cpu_metric, self._metrics_url)
            if value is not None:
                self._use_metrics = True
                self.server_cpu_source = f"process_cpu_seconds_total at {self._metrics_url}"

    @property
    def energy_source(self) -> str:
        if not self.zones:
            return NO_POWER_COUNTERS
        return "RAPL " + ", ".join(z.energy.parent.name for z in self.zones) + " (whole machine)"

    async def sample(self) -> CostSample:
        server_cpu: float | None = None
        rss: int | None = None
        if self.server_cpu_source != "unknown":
            if self._use_metrics and self._metrics_url is not None:
                server_cpu, rss = await asyncio.to_thread(fetch_process_metrics, self._metrics_url)
            elif self._pid is not None:
                server_cpu = self._cpu_of_pid(self._pid)
        if self._pid is not None:
            rss = proc_rss_bytes(self._pid)
        return CostSample(
            client_cpu_s=client_cpu_s(),
            server_cpu_s=server_cpu,
            server_rss_bytes=rss,
            energy_uj=read_energy_uj(self.zones) if self.zones else None,
        )

    def energy_j(self, before: CostSample, after: CostSample) -> float | None:
        if before.energy_uj is None or after.energy_uj is None:
            return None
        return energy_delta_j(self.zones, before.energy_uj, after.energy_uj)


def per_thousand(total: float | None, inferences: int) -> float | None:
    if total is None or inferences <= 0:
        return None
    return total * 1000 / inferences
