"""``inferd analyze`` on the benchmark's small MLP: the full grid measured, then the quick search
replayed over the grid's own measurements.

    python bench/models.py --only mlp          # once: builds bench/.work/repos/mlp-off
    flock /tmp/bench.lock .venv/bin/python bench/analyze_search.py [--interval-ms 1000]

1. ``inferd analyze mlp --search grid`` measures every config of the default space (its own
   ``inferd serve``, load points at concurrency 1, 8 and 32) into
   ``bench/.work/analyze-mlp-grid`` (a rerun resumes there; delete it to measure afresh).
2. The quick search (optuna TPE) is then run with seeds 0-9 and a budget of a quarter of the
   grid, each "measurement" answered by the grid's figures for that config, so every seed sees
   the same machine: it prints, per seed, the best throughput it found against the grid's best.
   The grid run ends with the confirmation round (the default and the three best measured
   again); each is printed with both figures.
3. One live quick search (seed 0, its own results directory) shows the same on fresh
   measurements, with the noise of a second run.

The grid's best and the quick search's best are measured on one shared 2-core machine where the
load generator competes with the server; the ratios are comparable within a run.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

from inferd.tools.analyze.measure import MeasureSettings
from inferd.tools.analyze.objective import Goals, judge
from inferd.tools.analyze.repeats import combine
from inferd.tools.analyze.search import QuickSearch, drive
from inferd.tools.analyze.space import Candidate, ModelFacts, default_space, enumerate_space
from inferd.tools.analyze.store import ResultStore

BENCH = Path(__file__).resolve().parent
REPO = BENCH / ".work" / "repos" / "mlp-off"
WORK = BENCH / ".work"
CONCURRENCY = "1,8,32"


def analyze(results: Path, search: str, interval_ms: int, extra: list[str]) -> None:
    cmd = [
        sys.executable, "-m", "inferd.cli.main", "analyze", "mlp",
        "--model-repository", str(REPO), "--search", search, "--results", str(results),
        "--concurrency", CONCURRENCY, "--measurement-interval", str(interval_ms), "--quiet",
        *extra,
    ]  # fmt: skip
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)


def settings(interval_ms: int) -> dict[str, object]:
    concurrency = tuple(int(c) for c in CONCURRENCY.split(","))
    return MeasureSettings("http-binary", "", concurrency, interval_ms).to_dict()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    if not REPO.is_dir():
        print(f"{REPO} is missing: run python bench/models.py --only mlp", file=sys.stderr)
        return 2
    grid_dir = WORK / "analyze-mlp-grid"
    analyze(grid_dir, "grid", args.interval_ms, [])
    goals = Goals()
    store = ResultStore(grid_dir, settings(args.interval_ms))
    rounds = store.measurements("mlp")
    # the search saw the first round; the confirmation round is reported below
    measured = [m for m in rounds if m.repeat == 0]
    outcome = judge("mlp", measured, goals)
    scores = {m.candidate: outcome.verdict(m).score(goals) for m in measured if not m.is_default}
    confirmed = judge("mlp", combine(rounds), goals, confirmed_only=True)
    space = default_space(ModelFacts("mlp", 64, onnxruntime=True), cores=2)
    candidates = enumerate_space(space)
    assert set(candidates) <= set(scores), "the grid run did not measure the whole space"
    grid_best = max(scores[c] for c in candidates)
    default = outcome.default
    default_value = outcome.verdict(default).value if default is not None else None
    budget = len(candidates) // 4
    print(f"\ngrid: {len(candidates)} configs; best {grid_best:.0f} infer/s", end="")
    print(f" (the model's own config: {default_value:.0f} infer/s)" if default_value else "")
    for m in (x for x in rounds if x.repeat > 0):
        first = outcome.verdict(next(x for x in measured if x.key == m.key)).value or 0.0
        again = judge("mlp", [m], goals).verdict(m).value or 0.0
        print(f"  confirmation: {m.label} measured {first:.0f} then {again:.0f} infer/s")
    if confirmed.best is not None:
        value = confirmed.verdict(confirmed.best).value or 0.0
        margin = confirmed.margin()
        against = f", {margin * 100:+.0f}% against the default's mean" if margin else ""
        print(f"  chosen after confirmation: {confirmed.best.label}, mean {value:.0f} infer/s"
              + against)  # fmt: skip
    print(f"quick search replayed on the grid's figures, budget {budget}:")
    hits = 0
    for seed in range(args.seeds):
        found: dict[Candidate, float] = {}

        async def lookup(candidate: Candidate, found: dict[Candidate, float] = found) -> float:
            found[candidate] = scores[candidate]
            return found[candidate]

        searcher = QuickSearch(space, candidates, seed=seed)
        asyncio.run(drive(searcher, lookup, budget=budget, known={}, space=candidates))
        best = max(found.values())
        hits += best >= 0.95 * grid_best
        print(f"  seed {seed}: {len(found)} measured, best {best:.0f} = "
              f"{best / grid_best * 100:.1f}% of the grid's best")  # fmt: skip
    print(f"within 5% of the grid's best: {hits} of {args.seeds} seeds")
    live_dir = WORK / "analyze-mlp-quick"
    analyze(live_dir, "quick", args.interval_ms, ["--budget", str(budget)])
    live = judge(
        "mlp",
        combine(ResultStore(live_dir, settings(args.interval_ms)).measurements("mlp")),
        goals,
        confirmed_only=True,
    )
    if live.best is not None:
        value = live.verdict(live.best).value or 0.0
        again = scores.get(live.best.candidate)
        print(
            f"live quick search: best {live.best.label} {value:.0f} infer/s"
            + (f"; the grid measured it at {again:.0f} ({again / grid_best * 100:.1f}% of the "
               "grid's best)" if again is not None else "")
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
