"""Reading one run of ``bench/many_models_mixed.py``: the requests its clients made and the
server's log, into the figures its report prints (hit ratio, samples over the budget and what
was loading then, cold loads, when the shifted popular models were all resident)."""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Traffic:
    """One run's requests: (model, start, end) in wall-clock seconds, failures, RSS samples."""

    requests: list[tuple[str, float, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    rss_at: list[float] = field(default_factory=list)  # each sample's wall-clock time
    # (resident set, the sum of the server's accounted model sizes) every half second
    accounted: list[tuple[int, int]] = field(default_factory=list)


_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "
_LOADED = re.compile(_STAMP + r".*model '([^']+)' loaded on demand in ([0-9.]+) s", re.MULTILINE)
_LOADING = re.compile(_STAMP + r".*model '([^']+)' loading on demand", re.MULTILINE)
_EVICTED = re.compile(_STAMP + r".*model '([^']+)' evicted at ", re.MULTILINE)
_START = re.compile(
    r"model '([^']+)' loading on demand \([^,]+, \d+ loads under way, (\d+) waiting; "
    r"(\d+) of (\d+) bytes reserved after ([0-9.]+) s for room\)"
)


def _wall(stamp: str) -> float:
    local = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")
    return local.timestamp()


def events(log: str) -> tuple[list[tuple[float, str, float]], list[tuple[float, str]]]:
    """Loads (end, model, seconds) and evictions (time, model) from the server's log."""
    loads = [(_wall(m[1]), m[2], float(m[3])) for m in _LOADED.finditer(log)]
    evictions = [(_wall(m[1]), m[2]) for m in _EVICTED.finditer(log)]
    return loads, evictions


def load_starts(log: str, kinds: dict[str, str]) -> str:
    """What the server's log says at each load's start: the other loads waiting (for a load
    thread or for room), and for the MiniLM loads what they needed, reserved and waited."""
    starts = [(m[1], int(m[2]), int(m[3]), int(m[4]), float(m[5])) for m in _START.finditer(log)]
    if not starts:
        return "(the server's log names no load starts)"
    mib = 1 << 20
    waiting = [float(w) for _, w, _, _, _ in starts]
    text = f"loads waiting at each start: median {pct(waiting, 50):.0f}, p90 {pct(waiting, 90):.0f}"
    large = [(r, n, s) for name, _, r, n, s in starts if kinds.get(name) == "minilm"]
    if large:
        need = pct([n / mib for _, n, _ in large], 50)
        held = pct([r / mib for r, _, _ in large], 50)
        waited = [s for _, _, s in large]
        text += (
            f"; MiniLM loads ({len(large)}): needed median {need:.0f} MiB, reserved median "
            f"{held:.0f} MiB, waited for room median {pct(waited, 50):.2f} s, "
            f"{sum(waited):.0f} s in all"
        )
    return text


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


@dataclass
class Result:
    policy: str
    requests: int
    failed: int
    hit_ratio: float
    hit_p99_s: float
    all_p99_s: float
    rss_max: int
    over_budget_samples: int
    misses_per_load: float  # misses in the measured window over the loads begun in it
    over_at: list[str]  # when the samples over budget were taken (UTC, as the server logs)
    samples: int
    cold: dict[str, list[float]]
    shift_s: float
    loads: int
    evictions: int
    thrash: int
    failures: list[str]
    # samples over budget by what was loading then: "minilm", "small" (only small models), "none"
    over_during: dict[str, int] = field(default_factory=dict)
    accounted: list[tuple[int, int]] = field(default_factory=list)
    misses: dict[str, int] = field(default_factory=dict)  # misses in the window, by kind
    starts: str = ""  # what the log says at the loads' starts (load_starts)


def analyse(
    policy: str,
    traffic: Traffic,
    log: str,
    kinds: dict[str, str],
    window: tuple[float, float],
    shift: tuple[float, list[str]],
    budget: int,
    counters: tuple[int, int, int],
) -> Result:
    loads, evictions = events(log)
    by_model: dict[str, list[float]] = {}
    for end, name, _ in loads:
        by_model.setdefault(name, []).append(end)
    slack = 0.005  # the log's stamps are in milliseconds
    counted = [r for r in traffic.requests if window[0] <= r[1] < window[1]]
    hits: list[float] = []
    misses: dict[str, int] = {}
    for name, t0, t1 in counted:
        if not any(t0 - slack <= end <= t1 + slack for end in by_model.get(name, [])):
            hits.append(t1 - t0)
        else:
            misses[kinds[name]] = misses.get(kinds[name], 0) + 1
    failed_in = len(traffic.failures)
    cold: dict[str, list[float]] = {}
    for _, name, seconds in loads:
        cold.setdefault(kinds[name], []).append(seconds)
    # after the shift: when were the new most popular models all resident?
    at, hot = shift
    resident: set[str] = set()
    timeline = sorted(
        [(t, "load", n) for t, n, _ in loads] + [(t, "evict", n) for t, n in evictions]
    )
    shift_s = float("nan")  # never, within the run
    for k, (t, what, name) in enumerate(timeline):
        if what == "load":
            resident.add(name)
        else:
            resident.discard(name)
        following = timeline[k + 1][0] if k + 1 < len(timeline) else float("inf")
        if following >= at and set(hot) <= resident:
            shift_s = max(0.0, t - at)  # 0: they were resident when the popularity shifted
            break
    rss = traffic.rss
    # what was loading during each sample over budget
    started = [(_wall(m[1]), m[2]) for m in _LOADING.finditer(log)]
    spans = []
    for t0, name in started:
        ends = [e for e, n, _ in loads if n == name and e >= t0]
        spans.append((t0, min(ends) if ends else float("inf"), kinds[name]))
    over_during = {"minilm": 0, "small": 0, "none": 0}
    over_at = []
    for value, at in zip(rss, traffic.rss_at, strict=True):
        if value > budget:
            over_at.append(f"{time.strftime('%H:%M:%S', time.gmtime(at))}.{int(at % 1 * 1e3):03d}")
            now = {k for t0, t1, k in spans if t0 - 0.005 <= at <= t1 + 0.005}
            key = "minilm" if "minilm" in now else "small" if now else "none"
            over_during[key] += 1
    return Result(
        policy=policy,
        requests=len(counted),
        failed=failed_in,
        hit_ratio=len(hits) / max(1, len(counted)),
        hit_p99_s=pct(hits, 99),
        all_p99_s=float("nan"),
        rss_max=max(rss) if rss else 0,
        over_budget_samples=sum(1 for r in rss if r > budget),
        misses_per_load=(len(counted) - len(hits))
        / max(1, sum(1 for t0, _ in started if window[0] <= t0 < window[1])),
        over_at=over_at,
        samples=len(rss),
        cold=cold,
        shift_s=shift_s,
        loads=counters[0],
        evictions=counters[1],
        thrash=counters[2],
        failures=traffic.failures,
        accounted=traffic.accounted,
        over_during=over_during,
        misses=misses,
    )
