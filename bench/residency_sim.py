"""The eviction policy's hit ratio on the mixed benchmark's own mix, simulated (no server).

The catalogue of ``bench/many_models_mixed.py`` (300 tabular models, 10 MiniLM copies), each
model's size and cold-load time taken from a server log of that benchmark (the median of its
loads there; a model the log never loaded: the median of its kind), its popularity ranks
(Zipf 1.1, seed 1), a budget of a fifth of the bytes, requests at 25 a second drawn
independently. :func:`inferd.repository.eviction.choose_victims` decides as the loader calls
it; a miss that finds no room counts as a miss and loads nothing. The first quarter warms up.

    .venv/bin/python bench/residency_sim.py [bench/.work/many_models/server-cost-4.log]
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

import numpy as np

from inferd.repository.eviction import EvictionConfig, Resident, choose_victims, decayed_heat

LOG = Path(__file__).parent / ".work" / "many_models" / "server-cost-4.log"
# the policy's residency rule may read how soon a model was loaded again after its eviction
_NEW = "reloaded_after_s" in Resident.__dataclass_fields__
_LOADED = re.compile(r"model '(\w+)' loaded on demand in ([\d.]+) s \(\w+, (\d+) bytes")


def catalogue(log: Path) -> tuple[list[str], dict[str, int], dict[str, float]]:
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


def simulate(
    names: list[str],
    size: dict[str, int],
    reload_s: dict[str, float],
    cfg: EvictionConfig,
    *,
    rate: float = 25.0,
    seconds: float = 2400.0,
    seed: int = 3,
) -> float:
    order = [names[i] for i in np.random.default_rng(1).permutation(len(names))]
    weights = 1.0 / np.arange(1, len(names) + 1) ** 1.1
    p = weights / weights.sum()
    room = max(int(sum(size.values()) * 0.2), int(max(size.values()) * 1.25))
    n = int(rate * seconds)
    draws = np.random.default_rng(seed).choice(len(order), size=n, p=p).tolist()
    heat: dict[str, float] = {}
    last: dict[str, float] = {}
    loaded_at: dict[str, float] = {}
    evicted_at: dict[str, float] = {}
    reloaded_after: dict[str, float] = {}
    resident: set[str] = set()
    hits = 0
    for k, i in enumerate(draws):
        m, now = order[i], k / rate
        hit = m in resident
        if not hit:
            view = [
                Resident(
                    r,
                    size[r],
                    last[r],
                    loaded_at[r],
                    heat=heat[r],
                    reload_s=reload_s[r],
                    **({"reloaded_after_s": reloaded_after.get(r, float("inf"))} if _NEW else {}),
                )
                for r in resident
            ]
            choice = choose_victims(view, size[m], room, now, cfg)
            if choice.fits:
                for v in choice.victims:
                    resident.discard(v)
                    evicted_at[v] = now
                resident.add(m)
                loaded_at[m] = now
                reloaded_after[m] = now - evicted_at.get(m, float("-inf"))
        heat[m] = decayed_heat(heat.get(m, 0.0), now - last.get(m, now), cfg.heat_half_life_s) + 1
        last[m] = now
        hits += hit and k >= n // 4
    return hits / (n - n // 4)


def main() -> None:
    names, size, reload_s = catalogue(Path(sys.argv[1]) if len(sys.argv) > 1 else LOG)
    print("| policy | no residency | 10 s residency |  (medians of 5 seeds, their range)")
    print("|---|---|---|")
    for policy in ("cost", "lru"):
        row = []
        for residency in (0.0, 10.0):
            cfg = EvictionConfig(residency, policy)
            got = [simulate(names, size, reload_s, cfg, seed=seed) for seed in range(3, 8)]
            row.append(f"{statistics.median(got):.3f} ({min(got):.3f}-{max(got):.3f})")
        print(f"| `{policy}` | {row[0]} | {row[1]} |")


if __name__ == "__main__":
    main()
