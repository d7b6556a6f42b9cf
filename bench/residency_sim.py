"""The eviction policy's hit ratio on the mixed benchmark's own mix, simulated (no server).

The catalogue of ``bench/many_models_mixed.py`` (300 tabular models, 10 MiniLM copies), each
model's size and cold-load time taken from a server log of that benchmark (the median of its
loads there; a model the log never loaded: the median of its kind), its popularity ranks
(Zipf 1.1, seed 1), a budget of a fifth of the bytes, 60,000 requests drawn independently at
25 a second (the server's rate in the benchmark's earlier runs), 86 (its latest run's: 2,592
counted in 30 s) and 250 (a faster machine's: more models then count as hot).
:func:`inferd.repository.eviction.choose_victims` decides as the loader calls it; a miss
that finds no room counts as a miss (a residency refusal) and loads nothing. The first quarter
warms up. Deterministic: the catalogue is read from
``bench/residency_sim_catalogue.json`` (taken from a log of a quiet machine: tabular models of
0.5-16 MiB loading in 18-480 ms, MiniLM copies of 200-400 MiB in 0.4-1.3 s), unless a server
log is given (with ``--save``, written there).

Each rule is run with 5 seeds: the hit ratio's median and range, the residency's refusals and
the seconds of loads per second (medians). How fast the machine loads changes no decision:
``cost`` ranks by requests times load time per byte, so three times every load time (a busy
machine's) ranks the same, and the residency's rules read no load time.

    .venv/bin/python bench/residency_sim.py [bench/.work/many_models/server-cost-4.log [--save]]
    .venv/bin/python bench/residency_sim.py --overhead [LOG]   # room taken, MiniLM load peaks
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferd.repository import eviction
from inferd.repository.eviction import EvictionConfig, Resident, choose_victims, decayed_heat

CATALOGUE = Path(__file__).parent / "residency_sim_catalogue.json"
_LOADED = re.compile(r"model '(\w+)' loaded on demand in ([\d.]+) s \(\w+, (\d+) bytes")
SEEDS = range(3, 8)
RATES = (25.0, 86.0, 250.0)


def from_log(log: Path) -> tuple[list[str], dict[str, int], dict[str, float]]:
    sizes: dict[str, list[int]] = {}
    times: dict[str, list[float]] = {}
    for m in _LOADED.finditer(log.read_text()):
        sizes.setdefault(m[1], []).append(int(m[3]))
        times.setdefault(m[1], []).append(float(m[2]))
    kinds = ("onnx", "xgboost", "lightgbm")
    names = sorted(
        [f"{kinds[k % 3]}_{k:03d}" for k in range(300)] + [f"minilm_{k:02d}" for k in range(10)]
    )
    size, reload_s = {}, {}
    for name in names:
        kind = name.split("_")[0]
        same = [n for n in sizes if n.startswith(kind)]
        size[name] = int(
            statistics.median(sizes.get(name) or [statistics.median(sizes[n]) for n in same])
        )
        reload_s[name] = statistics.median(
            times.get(name) or [statistics.median(times[n]) for n in same]
        )
    return names, size, reload_s


def catalogue(path: Path = CATALOGUE) -> tuple[list[str], dict[str, int], dict[str, float]]:
    rows = json.loads(path.read_text())  # name: [size in bytes, load seconds]
    names = sorted(rows)
    return names, {n: int(rows[n][0]) for n in names}, {n: float(rows[n][1]) for n in names}


@dataclass
class Outcome:
    hit_ratio: float
    refusals: int  # misses the residency refused (counted after the warm-up)
    loading: float  # seconds of loads per second (after the warm-up)


def simulate(
    names: list[str],
    size: dict[str, int],
    reload_s: dict[str, float],
    cfg: EvictionConfig,
    *,
    rate: float = 25.0,
    requests: int = 60_000,
    seed: int = 3,
    taken: int = 0,
    peak: int = 0,
    prefetch_every: int = 0,
) -> Outcome:
    """``taken``: bytes of the room held by something other than models; ``peak``: bytes a
    MiniLM copy's load needs beyond its size while it runs (freed when it ends);
    ``prefetch_every``: every that many requests, a model not resident that was asked for
    before is loaded into room nobody holds (the one most worth keeping per byte that fits),
    as a server refilling what a large eviction left free would (0: never)."""
    order = [names[i] for i in np.random.default_rng(1).permutation(len(names))]
    weights = 1.0 / np.arange(1, len(names) + 1) ** 1.1
    p = weights / weights.sum()
    room = max(int(sum(size.values()) * 0.2), int(max(size.values()) * 1.25)) - taken
    n = requests
    draws = np.random.default_rng(seed).choice(len(order), size=n, p=p).tolist()
    heat: dict[str, float] = {}
    last: dict[str, float] = {}
    loaded_at: dict[str, float] = {}
    evicted_at: dict[str, float] = {}
    reloaded_after: dict[str, float] = {}
    resident: set[str] = set()
    hits = refusals = 0
    loading = 0.0
    for k, i in enumerate(draws):
        m, now = order[i], k / rate
        hit = m in resident
        counted = k >= n // 4
        if not hit:
            view = [
                Resident(
                    r,
                    size[r],
                    last[r],
                    loaded_at[r],
                    heat=heat[r],
                    reload_s=reload_s[r],
                    reloaded_after_s=reloaded_after.get(r, math.inf),
                )
                for r in resident
            ]
            need = size[m] + (peak if m.startswith("minilm") else 0)
            choice = choose_victims(view, need, room, now, cfg)
            if choice.fits:
                for v in choice.victims:
                    resident.discard(v)
                    evicted_at[v] = now
                resident.add(m)
                loaded_at[m] = now
                reloaded_after[m] = now - evicted_at.get(m, -math.inf)
                loading += reload_s[m] if counted else 0.0
            elif choice.held_by_residency and counted:
                refusals += 1
        heat[m] = decayed_heat(heat.get(m, 0.0), now - last.get(m, now), cfg.heat_half_life_s) + 1
        last[m] = now
        if prefetch_every and k % prefetch_every == 0:
            free = room - sum(size[r] for r in resident)
            worth = {
                r: decayed_heat(h, now - last[r], cfg.heat_half_life_s) * reload_s[r] / size[r]
                for r, h in heat.items()
                if r not in resident and size[r] <= free
            }
            if worth:
                best = max(worth, key=worth.__getitem__)
                resident.add(best)
                loaded_at[best] = now
                reloaded_after[best] = now - evicted_at.get(best, -math.inf)
                loading += reload_s[best] if counted else 0.0
        hits += hit and counted
    return Outcome(hits / (n - n // 4), refusals, loading / ((n - n // 4) / rate))


#: the rules compared: (label, policy, min residency, HOLD_MIN_REQUESTS, HOLD_ONLY_WHEN_NEEDED);
#: with a hot-model threshold of 0 and holds against every load, the rule before
RULES = (
    ("`cost`, no residency", "cost", 0.0, 2.0, True),
    (
        "`cost`, 10 s: young model that thrashes, held against every load (before)",
        "cost",
        10.0,
        0.0,
        False,
    ),
    (
        "`cost`, 10 s: ... asked for >= 2 times per residency, against every load",
        "cost",
        10.0,
        2.0,
        False,
    ),
    (
        "`cost`, 10 s: young model that thrashes, only against a load needing it",
        "cost",
        10.0,
        0.0,
        True,
    ),
    (
        "`cost`, 10 s: ... asked for >= 2 times, only against a load needing it (now)",
        "cost",
        10.0,
        2.0,
        True,
    ),
    ("`lru`, no residency", "lru", 0.0, 2.0, True),
    ("`lru`, 10 s: every young model held (unchanged)", "lru", 10.0, 2.0, True),
)


def _row(got: list[Outcome]) -> str:
    ratios = [o.hit_ratio for o in got]
    refusals = statistics.median(o.refusals for o in got)
    loading = statistics.median(o.loading for o in got)
    hit = f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
    return f"{hit} | {refusals:g} | {loading:.2f}"


def overhead(log: Path | None = None) -> None:
    """``cost`` at 86 requests a second with part of the room taken by memory no model
    accounts for, and with MiniLM loads that need a transient peak beyond their size; the
    sizes and load times of the catalogue, or of a server log of the mixed benchmark."""
    names, size, reload_s = catalogue() if log is None else from_log(log)
    cfg = EvictionConfig(10.0, "cost")
    print("| room taken | MiniLM load peak | hit ratio | load seconds a second |")
    print("|---|---|---|---|")
    pairs = ((0, 0), (140, 0), (0, 100), (140, 100), (170, 100), (200, 100))
    # the server's MiniLM loads: about 90 MiB measured, 250 when estimated per byte of size
    pairs += ((140, 250), (140, 90), (60, 90), (60, 0))
    for taken, peak in pairs:
        got = [
            simulate(
                names, size, reload_s, cfg, rate=86.0, seed=s, taken=taken << 20, peak=peak << 20
            )
            for s in SEEDS
        ]
        hit, _, loading = _row(got).split(" | ")
        print(f"| {taken} MiB | {peak} MiB | {hit} | {loading} |", flush=True)
    # free room refilled between misses: hits bought with loads (CPU the serving shares)
    print("\n| room taken | MiniLM load peak | a refill every N requests | hit ratio | load s/s |")
    print("|---|---|---|---|---|")
    for taken, peak in ((140, 250), (140, 90)):
        for every in (4, 16, 64):
            got = [
                simulate(
                    names,
                    size,
                    reload_s,
                    cfg,
                    rate=86.0,
                    seed=s,
                    taken=taken << 20,
                    peak=peak << 20,
                    prefetch_every=every,
                )
                for s in SEEDS
            ]
            hit, _, loading = _row(got).split(" | ")
            print(f"| {taken} MiB | {peak} MiB | {every} | {hit} | {loading} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description="The eviction policy's hit ratio on the mixed benchmark's mix, simulated."
    )
    ap.add_argument(
        "log",
        nargs="?",
        type=Path,
        help="a server log of bench/many_models_mixed.py to take each model's size and load "
        "time from (default: the frozen catalogue beside this script)",
    )
    ap.add_argument("--save", action="store_true", help="freeze the log's catalogue")
    ap.add_argument(
        "--overhead",
        action="store_true",
        help="`cost` with part of the room taken and MiniLM load peaks, instead of the rules",
    )
    args = ap.parse_args()
    if args.save and args.log is None:
        ap.error("--save needs a server log to take the catalogue from")
    if args.overhead:
        overhead(args.log)
        return
    if args.log is not None:
        names, size, reload_s = from_log(args.log)
        if args.save:
            rows = [f'"{n}": [{size[n]}, {round(reload_s[n], 6)}]' for n in names]
            CATALOGUE.write_text("{\n" + ",\n".join(rows) + "\n}\n")  # one model a line
    else:
        names, size, reload_s = catalogue()
    print("| requests a second | rule | hit ratio | residency refusals | load seconds a second |")
    print("|---|---|---|---|---|")
    defaults = eviction.HOLD_MIN_REQUESTS, eviction.HOLD_ONLY_WHEN_NEEDED
    try:
        for rate in RATES:
            for label, policy, residency, hot, when_needed in RULES:
                eviction.HOLD_MIN_REQUESTS, eviction.HOLD_ONLY_WHEN_NEEDED = hot, when_needed
                cfg = EvictionConfig(residency, policy)
                got = [simulate(names, size, reload_s, cfg, rate=rate, seed=s) for s in SEEDS]
                print(f"| {rate:g} | {label} | {_row(got)} |", flush=True)
    finally:
        eviction.HOLD_MIN_REQUESTS, eviction.HOLD_ONLY_WHEN_NEEDED = defaults


if __name__ == "__main__":
    main()
