"""The grid and quick searches on a synthetic objective, and the loop that spends the budget and
skips what an earlier run measured."""

from __future__ import annotations

import asyncio
import math

from inferd.tools.analyze.runner import plan_search
from inferd.tools.analyze.search import GridSearch, QuickSearch, drive
from inferd.tools.analyze.space import Candidate, Space, enumerate_space

# 4 instance counts x 3 thread settings x (off + 4 max batches x 4 delays) = 204 configs
SPACE = Space(
    instances=(1, 2, 3, 4),
    max_batch_sizes=(8, 16, 32, 64),
    dynamic_batching=(False, True),
    queue_delays_us=(0, 100, 500, 2000),
    intra_op_threads=(None, 1, 2),
    own_max_batch_size=64,
)
CANDIDATES = enumerate_space(SPACE)


def synthetic(c: Candidate) -> float:
    """A throughput-like surface: instances help up to 3, one thread each is best, batching
    helps more with a larger max batch, and the queue delay has a sweet spot near 200 µs. Two
    of the 204 configs are within 5% of the optimum."""
    instances = {1: 1.0, 2: 1.7, 3: 1.9, 4: 1.8}[c.instances]
    threads = {None: 1.0, 1: 1.1, 2: 0.8}[c.intra_op_threads]
    batching = 1.0
    if c.dynamic_batching:
        batching += 0.8 * math.log2(c.max_batch_size) / 6
        batching -= 0.3 * abs(math.log10(c.max_queue_delay_us + 10) - 2.3)
    return 1000.0 * instances * threads * batching


BEST = max(synthetic(c) for c in CANDIDATES)


def run(searcher: object, budget: int, known: dict[Candidate, float] | None = None) -> dict:
    measured: dict[Candidate, float] = {}

    async def measure(candidate: Candidate) -> float:
        assert candidate not in measured, "measured twice"
        measured[candidate] = synthetic(candidate)
        return measured[candidate]

    count = asyncio.run(
        drive(searcher, measure, budget=budget, known=known or {}, space=CANDIDATES)  # type: ignore[arg-type]
    )
    assert count == len(measured)
    return measured


def test_the_space_is_the_size_the_docstring_says() -> None:
    assert len(CANDIDATES) == 204
    assert sum(synthetic(c) >= 0.95 * BEST for c in CANDIDATES) == 2


def test_the_grid_measures_everything_and_finds_the_optimum() -> None:
    measured = run(GridSearch(CANDIDATES), budget=len(CANDIDATES))
    assert set(measured) == set(CANDIDATES)
    assert max(measured.values()) == BEST


def test_the_quick_search_gets_within_5_percent_in_a_quarter_of_the_grid() -> None:
    budget = len(CANDIDATES) // 4
    measured = run(QuickSearch(SPACE, CANDIDATES, seed=0), budget=budget)
    assert len(measured) <= budget
    assert max(measured.values()) >= 0.95 * BEST


def test_the_quick_search_is_repeatable_with_its_seed() -> None:
    first = run(QuickSearch(SPACE, CANDIDATES, seed=3), budget=12)
    second = run(QuickSearch(SPACE, CANDIDATES, seed=3), budget=12)
    assert list(first) == list(second)


def test_the_quick_search_proposes_only_valid_configs_of_the_space() -> None:
    space = Space(
        instances=(1, 2),
        max_batch_sizes=(4, 16),
        dynamic_batching=(True,),
        queue_delays_us=(0, 100),
        preferred_batch_sizes=((), (8,), (16,)),
        own_max_batch_size=16,
    )
    candidates = enumerate_space(space)
    measured: list[Candidate] = []

    async def measure(candidate: Candidate) -> float:
        measured.append(candidate)
        return float(candidate.instances)

    searcher = QuickSearch(space, candidates, seed=1)
    count = asyncio.run(
        drive(searcher, measure, budget=len(candidates), known={}, space=candidates)
    )
    assert count == len(candidates)  # it runs out of new configs and stops at the full space
    assert sorted(measured) == sorted(candidates)


def test_results_of_an_earlier_run_are_not_measured_again_and_count_in_the_budget() -> None:
    earlier = {c: synthetic(c) for c in CANDIDATES[:5]}
    for searcher in (GridSearch(CANDIDATES), QuickSearch(SPACE, CANDIDATES, seed=0)):
        measured = run(searcher, budget=8, known=earlier)
        assert not set(measured) & set(earlier)
        assert len(measured) == 3


def test_a_finished_run_measures_nothing_more() -> None:
    everything = {c: synthetic(c) for c in CANDIDATES}
    assert run(GridSearch(CANDIDATES), budget=len(CANDIDATES), known=everything) == {}


def test_plan_search() -> None:
    assert plan_search("auto", 16, None) == ("grid", 16)
    assert plan_search("auto", 17, None) == ("quick", 5)
    assert plan_search("quick", 204, None) == ("quick", 51)
    assert plan_search("quick", 6, None) == ("quick", 4)
    assert plan_search("grid", 30, 10) == ("grid", 10)
    assert plan_search("grid", 3, 10) == ("grid", 3)
