"""Che's approximation of an LRU cache of models (inferd.tools.scaling.model_cache) against a
seeded simulation of LRU under the independent reference model, and the pods ``inferd plan
--models`` finds."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from inferd.tools.scaling.model_cache import (
    ModelFleet,
    che_hit_ratio,
    estimate_cache,
    plan_pods,
    replicated,
    sharded,
    size_aware_hit_ratio,
    zipf_popularity,
)


def simulate_lru(
    popularity: np.ndarray, sizes: np.ndarray, capacity: float, requests: int, seed: int
) -> float:
    """The hit ratio of an LRU cache of ``capacity`` bytes: requests drawn independently from
    ``popularity``; a miss evicts least recently used models until the new one fits (a model
    larger than the capacity is never held). The first quarter warms the cache up."""
    rng = np.random.default_rng(seed)
    draws = rng.choice(len(popularity), size=requests, p=popularity)
    cache: OrderedDict[int, None] = OrderedDict()
    held = 0.0
    hits = counted = 0
    warm = requests // 4
    for n, model in enumerate(draws.tolist()):
        hit = model in cache
        if hit:
            cache.move_to_end(model)
        elif sizes[model] <= capacity:
            while held + sizes[model] > capacity:
                old, _ = cache.popitem(last=False)
                held -= sizes[old]
            cache[model] = None
            held += sizes[model]
        if n >= warm:
            counted += 1
            hits += hit
    return hits / counted


@pytest.mark.parametrize("s", [0.6, 0.9, 1.2])
@pytest.mark.parametrize("share", [0.05, 0.2, 0.5])
def test_che_matches_a_simulation_of_lru_with_equal_sizes(s: float, share: float) -> None:
    models = 300
    p = zipf_popularity(models, s)
    sizes = np.full(models, 100.0)
    capacity = share * models * 100.0
    estimate = che_hit_ratio(p, sizes, capacity)
    simulated = simulate_lru(p, sizes, capacity, 120_000, seed=7)
    assert estimate.hit_ratio == pytest.approx(simulated, abs=0.015)
    assert estimate.resident_models == pytest.approx(share * models, rel=1e-6)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_che_matches_a_simulation_of_lru_with_unequal_sizes(seed: int) -> None:
    models = 200
    rng = np.random.default_rng(seed)
    p = zipf_popularity(models, 1.0)
    sizes = rng.lognormal(mean=np.log(50e6), sigma=1.0, size=models)  # a long tail of sizes
    capacity = 0.25 * float(sizes.sum())
    estimate = che_hit_ratio(p, sizes, capacity)
    simulated = simulate_lru(p, sizes, capacity, 120_000, seed=seed)
    assert estimate.hit_ratio == pytest.approx(simulated, abs=0.02)


def test_everything_that_fits_together_always_hits_and_a_model_too_big_never_does() -> None:
    p = zipf_popularity(4, 1.0)
    fits = che_hit_ratio(p, np.array([10.0, 10.0, 10.0, 10.0]), 40.0)
    assert fits.hit_ratio == pytest.approx(1.0)
    assert fits.too_big == 0
    one_too_big = che_hit_ratio(p, np.array([50.0, 10.0, 10.0, 10.0]), 40.0)
    assert one_too_big.too_big == 1
    assert one_too_big.hit_ratio == pytest.approx(1.0 - p[0])  # the others fit together
    simulated = simulate_lru(p, np.array([50.0, 10.0, 10.0, 10.0]), 40.0, 20_000, seed=3)
    assert one_too_big.hit_ratio == pytest.approx(simulated, abs=0.01)


def test_zipf_popularity_is_normalised_and_ranked() -> None:
    p = zipf_popularity(1000, 1.1)
    assert p.sum() == pytest.approx(1.0)
    assert np.all(np.diff(p) < 0)
    assert zipf_popularity(5, 0.0) == pytest.approx(np.full(5, 0.2))
    with pytest.raises(ValueError, match="at least 1"):
        zipf_popularity(0, 1.0)


def _fleet(**kw: object) -> ModelFleet:
    models = 1000
    return ModelFleet(
        sizes=np.full(models, 100e6),
        popularity=zipf_popularity(models, 1.0),
        room_bytes=5e9,  # 50 models a pod
        **kw,  # type: ignore[arg-type]
    )


def test_sharding_raises_the_hit_ratio_and_replication_does_not() -> None:
    fleet = _fleet()
    ratios = [sharded(fleet, pods).hit_ratio for pods in (1, 2, 4, 8, 20)]
    assert ratios == sorted(ratios)
    assert ratios[-1] == pytest.approx(1.0)  # 20 pods x 50 models hold all 1000
    assert replicated(fleet, 8).hit_ratio == pytest.approx(ratios[0])


def test_the_pods_needed_are_the_fewest_that_meet_the_target() -> None:
    fleet = _fleet()
    rows, needed = plan_pods(fleet, 0.9, max_pods=64)
    assert needed is not None
    assert sharded(fleet, needed).hit_ratio >= 0.9
    assert sharded(fleet, needed - 1).hit_ratio < 0.9
    assert [r.pods for r in rows][:3] == [1, 2, 4]
    _, none = plan_pods(fleet, 0.999999, max_pods=4)
    assert none is None


def test_load_time_at_a_rate_adds_pods_until_loading_takes_half_a_pods_time() -> None:
    _, hits_needed = plan_pods(_fleet(), 0.5, max_pods=64)
    fleet = _fleet(rate_rps=1000.0, load_s=0.5)
    _, needed = plan_pods(fleet, 0.5, max_pods=64)
    assert hits_needed is not None
    assert needed is not None
    assert needed > hits_needed  # 0.5 s loads at 1000 requests/s need more pods than hits do
    row = sharded(fleet, needed)
    assert row.load_share is not None
    assert row.load_share <= 0.5
    assert row.loads_per_s == pytest.approx(row.load_share / 0.5)


def test_the_size_aware_ceiling_holds_most_requests_per_byte() -> None:
    p = np.array([0.4, 0.3, 0.2, 0.1])
    sizes = np.array([100.0, 10.0, 10.0, 10.0])
    # 30 bytes: the three small ones (0.6 of the requests), not the large popular one
    estimate = size_aware_hit_ratio(p, sizes, 30.0)
    assert estimate.hit_ratio == pytest.approx(0.6)
    assert estimate.resident_models == 3
    # room for everything: every request hits, as with LRU; a model too big never does
    assert size_aware_hit_ratio(p, sizes, 130.0).hit_ratio == pytest.approx(1.0)
    assert size_aware_hit_ratio(p, sizes, 99.0).too_big == 1
    # equal sizes: the most popular models, at least what LRU holds
    equal = np.full(4, 10.0)
    assert size_aware_hit_ratio(p, equal, 20.0).hit_ratio == pytest.approx(0.7)
    assert estimate_cache(p, equal, 20.0, "lru").hit_ratio < 0.7
    with pytest.raises(ValueError, match="unknown eviction policy"):
        estimate_cache(p, equal, 20.0, "mru")
