"""The server's memory while one configuration is measured.

With the server's process id (the analyzer started it, or it runs in this process): its peak
resident set size during the measurement (``VmHWM`` of ``/proc/<pid>/status``, after resetting
the peak through ``/proc/<pid>/clear_refs`` when the measurement starts), or its resident size
at the end when the peak cannot be reset. Otherwise the server's Prometheus
``process_resident_memory_bytes``, when it exports one; else unknown.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
from pathlib import Path

__all__ = ["MemoryProbe", "parse_resident_metric", "parse_status_kib"]

_RSS_METRIC = re.compile(
    rb"^process_resident_memory_bytes(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.MULTILINE
)
_MIB = 1024.0 * 1024.0


def parse_status_kib(text: str, field: str) -> int | None:
    """A ``kB`` field (``VmHWM``, ``VmRSS``) of a ``/proc/<pid>/status`` text."""
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def parse_resident_metric(exposition: bytes) -> float | None:
    """``process_resident_memory_bytes`` of a Prometheus text exposition."""
    found = _RSS_METRIC.search(exposition)
    return float(found.group(1)) if found else None


class MemoryProbe:
    """``start()`` before a measurement, ``read_mb()`` after it."""

    def __init__(self, pid: int | None, metrics_url: str | None) -> None:
        self.pid = pid
        self.metrics_url = metrics_url
        self._peak_reset = False

    @property
    def source(self) -> str:
        if self.pid is not None:
            return f"/proc/{self.pid}/status"
        if self.metrics_url is not None:
            return f"process_resident_memory_bytes at {self.metrics_url}"
        return "unknown"

    def start(self) -> None:
        if self.pid is None:
            return
        try:
            # "5" resets the peak resident size (VmHWM) to the current one
            Path(f"/proc/{self.pid}/clear_refs").write_text("5", encoding="ascii")
            self._peak_reset = True
        except OSError:
            self._peak_reset = False

    async def read_mb(self) -> float | None:
        if self.pid is not None:
            return self._read_proc(self.pid)
        if self.metrics_url is not None:
            value = await asyncio.to_thread(_fetch_metric, self.metrics_url)
            return None if value is None else value / _MIB
        return None

    def _read_proc(self, pid: int) -> float | None:
        try:
            text = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
        except OSError:
            return None
        kib = parse_status_kib(text, "VmHWM" if self._peak_reset else "VmRSS")
        return None if kib is None else kib / 1024.0


def _fetch_metric(url: str, timeout_s: float = 2.0) -> float | None:
    target = url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"
    if "://" not in target:
        target = "http://" + target
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as answer:
            return parse_resident_metric(answer.read())
    except (OSError, ValueError):
        return None
