"""One replica's capacity curve, as ``inferd perf`` (or perf_analyzer) measured it: at each
load point the requests answered per second, latency percentiles, the server's queue time and
the server's CPU. Read from ``inferd perf --json-output`` or a CSV in perf_analyzer's columns
(``-f``); everything the simulation asks of a replica is interpolated from it by throughput.

A pod offered ``r`` requests per second below the curve's peak answers them with the latency
the curve shows where its throughput was ``r`` (an open-loop load settles where the closed loop
delivered that throughput); above the peak it answers ``max_rps`` per second and queues the
rest.
"""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from inferd.errors import InvalidArgumentError

__all__ = ["CapacityCurve", "CurvePoint", "load_curve", "parse_curve"]

Array = np.ndarray[Any, Any]
PERF_JSON_FORMAT = "inferd-perf/1"
_NORMAL = NormalDist()


@dataclass(frozen=True)
class CurvePoint:
    """One measured load point of one replica."""

    rps: float  # requests answered per second (inferences / batch size)
    percentiles_us: Mapping[int, float]  # latency percentiles, at least p50 and p99
    avg_latency_us: float | None = None
    queue_us: float | None = None  # the server's average queue time per request
    cpu_cores: float | None = None  # the server's CPU use (cores) at this load
    level: float = 0.0  # the concurrency or request rate that produced the point


@dataclass(frozen=True)
class CapacityCurve:
    """Points of rising throughput up to the replica's peak."""

    points: tuple[CurvePoint, ...]
    source: str = ""

    def __post_init__(self) -> None:
        if not self.points:
            raise InvalidArgumentError("a capacity curve needs at least one load point")
        rates = [p.rps for p in self.points]
        if any(b <= a for a, b in itertools.pairwise(rates)) or rates[0] <= 0:
            raise InvalidArgumentError(
                "a capacity curve's throughput must rise from point to point"
            )
        for p in self.points:
            if 50 not in p.percentiles_us or 99 not in p.percentiles_us:
                raise InvalidArgumentError("every load point needs its p50 and p99 latency")

    @property
    def max_rps(self) -> float:
        return self.points[-1].rps

    @cached_property
    def has_cpu(self) -> bool:
        return all(p.cpu_cores is not None for p in self.points)

    @cached_property
    def has_queue(self) -> bool:
        return all(p.queue_us is not None for p in self.points)

    @cached_property
    def percentile_levels(self) -> tuple[int, ...]:
        common = set(self.points[0].percentiles_us)
        for p in self.points[1:]:
            common &= set(p.percentiles_us)
        return tuple(sorted(common))

    @cached_property
    def _xs(self) -> tuple[float, ...]:
        return tuple(p.rps for p in self.points)

    @cached_property
    def _queue(self) -> tuple[float, ...]:
        if self.has_queue:
            return tuple(p.queue_us or 0.0 for p in self.points)
        base = self._base_latency(self.points[0])
        return tuple(max(0.0, self._base_latency(p) - base) for p in self.points)

    @cached_property
    def _cpu(self) -> tuple[float, ...]:
        return (0.0, *(p.cpu_cores or 0.0 for p in self.points))

    def percentiles_at(self, rps: float) -> dict[int, float]:
        return {
            q: _interp(rps, self._xs, tuple(p.percentiles_us[q] for p in self.points))
            for q in self.percentile_levels
        }

    def quantiles_us(self, rps: float, levels: Array) -> Array:
        """Latency (µs) at each quantile level in (0, 1): the measured percentiles joined as a
        piecewise log-normal (straight lines of log latency against the normal score)."""
        known = self.percentiles_at(rps)
        zs = np.array([_NORMAL.inv_cdf(q / 100) for q in known])
        logs = np.log(np.maximum([known[q] for q in known], 1e-3))
        z = np.array([_NORMAL.inv_cdf(float(u)) for u in levels])
        out = np.interp(z, zs, logs)
        low_slope = (logs[1] - logs[0]) / (zs[1] - zs[0])
        high_slope = (logs[-1] - logs[-2]) / (zs[-1] - zs[-2])
        out = np.where(z < zs[0], logs[0] + (z - zs[0]) * low_slope, out)
        out = np.where(z > zs[-1], logs[-1] + (z - zs[-1]) * high_slope, out)
        result: Array = np.maximum.accumulate(np.exp(out))
        return result

    @staticmethod
    def _base_latency(p: CurvePoint) -> float:
        return p.avg_latency_us if p.avg_latency_us is not None else p.percentiles_us[50]

    def queue_us_at(self, rps: float) -> float:
        """The average time a request waits in the server's queue at this load (the measured
        queue time, or when the curve has none, the latency added over the lightest point)."""
        return _interp(rps, self._xs, self._queue)

    def pending_at(self, rps: float) -> float:
        """Requests waiting to execute (Little's law on the queue time), what inferd's
        ``nv_inference_pending_request_count`` shows at this load."""
        return rps * self.queue_us_at(rps) / 1e6

    def cpu_cores_at(self, rps: float) -> float | None:
        """The server's CPU use at this load, from zero at idle; None if not measured."""
        if not self.has_cpu:
            return None
        return _interp(rps, (0.0, *self._xs), self._cpu)


def _interp(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """``np.interp`` for one value (held at the ends), without numpy's per-call cost."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)


def _monotone(points: Sequence[CurvePoint]) -> tuple[CurvePoint, ...]:
    """By load level, up to the peak throughput, each point above the one before."""
    ordered = sorted(points, key=lambda p: p.level)
    if not ordered:
        return ()
    peak = max(range(len(ordered)), key=lambda i: ordered[i].rps)
    kept: list[CurvePoint] = []
    for p in ordered[: peak + 1]:
        if p.rps > 0 and (not kept or p.rps > kept[-1].rps):
            kept.append(p)
    return tuple(kept)


def _from_json(doc: Mapping[str, Any], source: str) -> CapacityCurve:
    if doc.get("format") != PERF_JSON_FORMAT or not isinstance(doc.get("points"), list):
        raise InvalidArgumentError(f"{source}: not a file written by 'inferd perf --json-output'")
    points = []
    for raw in doc["points"]:
        if raw.get("mode") not in ("concurrency", "request-rate") or not raw.get("request_count"):
            continue
        batch = max(1, int(raw.get("batch_size", 1)))
        server = raw.get("server") or None
        cost = raw.get("cost") or {}
        cpu_s, duration = cost.get("server_cpu_s"), float(raw.get("duration_s") or 0.0)
        points.append(
            CurvePoint(
                rps=float(raw["throughput"]) / batch,
                percentiles_us={int(k): float(v) for k, v in raw["percentiles_us"].items()},
                avg_latency_us=float(raw["avg_latency_us"]),
                queue_us=float(server["queue_us"]) if server else None,
                cpu_cores=float(cpu_s) / duration if cpu_s is not None and duration > 0 else None,
                level=float(raw["level"]),
            )
        )
    return _curve(points, source)


def _from_csv(text: str, source: str, batch_size: int) -> CapacityCurve:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise InvalidArgumentError(f"{source}: the file is empty")
    header = [h.strip() for h in rows[0]]
    col = {name: i for i, name in enumerate(header)}
    level_col = col.get("Concurrency", col.get("Request Rate"))
    needed = ("Inferences/Second", "p50 latency", "p99 latency")
    if level_col is None or any(n not in col for n in needed):
        raise InvalidArgumentError(
            f"{source}: a CSV curve needs perf_analyzer's columns Concurrency (or Request Rate), "
            "Inferences/Second, p50 latency and p99 latency (inferd perf -f writes them)"
        )
    pct_cols = {int(h[1:].split()[0]): i for h, i in col.items() if h.endswith(" latency")}
    pct_cols = {q: i for q, i in pct_cols.items() if 0 < q < 100}
    queue_col = col.get("Server Queue")
    avg_col = col.get("Avg latency")
    parsed: list[tuple[float, float, dict[int, float], float | None, float | None]] = []
    try:
        for row in rows[1:]:
            if not row or not "".join(row).strip():
                continue
            parsed.append(
                (
                    float(row[level_col]),
                    float(row[col["Inferences/Second"]]) / batch_size,
                    {q: float(row[i]) for q, i in pct_cols.items()},
                    float(row[queue_col]) if queue_col is not None else None,
                    float(row[avg_col]) if avg_col is not None else None,
                )
            )
    except (ValueError, IndexError) as exc:
        raise InvalidArgumentError(f"{source}: a row is not a number in every column") from exc
    # perf writes 0 in the server columns when it had no server statistics
    queue_known = queue_col is not None and any((q or 0.0) > 0 for *_, q, _ in parsed)
    points = [
        CurvePoint(
            rps=rps,
            percentiles_us=pcts,
            avg_latency_us=avg,
            queue_us=queue if queue_known else None,
            level=level,
        )
        for level, rps, pcts, queue, avg in parsed
    ]
    return _curve(points, source)


def _curve(points: Sequence[CurvePoint], source: str) -> CapacityCurve:
    kept = _monotone(points)
    if not kept:
        raise InvalidArgumentError(f"{source}: no load point answered any request")
    return CapacityCurve(kept, source)


def parse_curve(text: str, source: str, *, batch_size: int = 1) -> CapacityCurve:
    """A curve from the text of an ``inferd perf`` JSON document or a perf_analyzer CSV."""
    if batch_size < 1:
        raise InvalidArgumentError("the batch size must be at least 1")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(f"{source}: not valid JSON ({exc.msg})") from exc
        return _from_json(doc, source)
    return _from_csv(text, source, batch_size)


def load_curve(path: Path, *, batch_size: int = 1) -> CapacityCurve:
    """The curve in ``path`` (``inferd perf --json-output`` or ``-f`` CSV). ``batch_size``
    divides a CSV's inferences per second into requests (a JSON file records its own)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgumentError(
            f"{path}: cannot read the capacity curve ({exc.strerror})"
        ) from exc
    return parse_curve(text, str(path), batch_size=batch_size)


def rate_at(curve: CapacityCurve, value_of: Callable[[float], float], target: float) -> float:
    """The highest per-pod request rate at which ``value_of(rps)`` stays at or below
    ``target`` (bisection over ``[0, max_rps]``; the value is assumed to rise with load)."""
    low, high = 0.0, curve.max_rps
    if value_of(high) <= target:
        return high
    for _ in range(60):
        mid = (low + high) / 2
        if value_of(mid) <= target:
            low = mid
        else:
            high = mid
    return low if math.isfinite(low) else 0.0
