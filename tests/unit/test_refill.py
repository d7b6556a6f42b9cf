"""Refilling free room (``--model-refill``): the choice, and the loader filling room that an
eviction left, never unloading anything for it."""

from __future__ import annotations

import asyncio

from inferd.repository.eviction import EvictionConfig, Resident, refill_choice
from tests.unit.test_eviction import _Host

CFG = EvictionConfig(0.0, "cost")


def _evicted(name: str, size: int, heat: float = 1.0, reload_s: float = 0.1) -> Resident:
    return Resident(name, size, last_used_s=100.0, loaded_at_s=0.0, heat=heat, reload_s=reload_s)


def test_the_most_worth_per_byte_that_fits_is_refilled() -> None:
    small = _evicted("small", 10, heat=2.0)
    large = _evicted("large", 100, heat=4.0)  # asked for more, worth less per byte
    slow = _evicted("slow", 10, heat=2.0, reload_s=1.0)  # as small, ten times the reload
    assert refill_choice([(small, 10), (large, 100), (slow, 10)], 200, 100.0, CFG) == "slow"
    assert refill_choice([(small, 10), (large, 100)], 200, 100.0, CFG) == "small"


def test_only_what_fits_with_its_load_peak_is_refilled() -> None:
    small = _evicted("small", 10)
    assert refill_choice([(small, 30)], 29, 100.0, CFG) is None  # its size fits, its peak not
    assert refill_choice([(small, 30)], 30, 100.0, CFG) == "small"
    assert refill_choice([], 1000, 100.0, CFG) is None


def test_a_model_not_asked_for_lately_is_not_refilled() -> None:
    cold = _evicted("cold", 10, heat=1.0)
    # one request, two half-lives ago: a quarter of its heat is left, the least refilled
    assert refill_choice([(cold, 10)], 100, 100.0 + 2 * CFG.heat_half_life_s, CFG) == "cold"
    assert refill_choice([(cold, 10)], 100, 100.0 + 2.1 * CFG.heat_half_life_s, CFG) is None


async def _settle(host: _Host, loader: object) -> None:
    """Until the loader has nothing more to refill (its loads and looks are instant here)."""
    seen = None
    for _ in range(200):
        await asyncio.sleep(0.01)
        now = (sorted(host.loaded), len(host.unloaded))
        if now == seen:
            return
        seen = now


async def test_room_an_eviction_left_is_refilled_without_unloading_anything() -> None:
    host = _Host({"s0": 40, "s1": 40, "large": 200, "s2": 40})
    loader = host.loader(1000 + 250, min_residency_s=0.0, refill=True, refill_s=0.01)
    await loader.start()
    try:
        for name in ("s0", "s1", "large", "s2"):  # each asked for once (touch: a request)
            await loader.ensure(name)  # the large one unloads s0, the oldest; s2 the large
            loader.touch(name)  # one, the least worth per byte
        assert [n for n, _ in host.unloaded] == ["s0", "large"]
        await _settle(host, loader)
        # s0 fits in the room the large model left; the large one does not fit again
        assert sorted(host.loaded) == ["s0", "s1", "s2"]
        assert [n for n, _ in host.unloaded] == ["s0", "large"]  # nothing unloaded for it
        assert loader.statistics().loads.get("refill") == 1
    finally:
        await loader.close()


async def test_without_the_setting_nothing_is_refilled() -> None:
    host = _Host({"s0": 40, "s1": 40, "large": 200, "s2": 40})
    loader = host.loader(1000 + 250, min_residency_s=0.0, refill_s=0.01)
    await loader.start()
    try:
        for name in ("s0", "s1", "large", "s2"):
            await loader.ensure(name)
            loader.touch(name)
        await _settle(host, loader)
        assert sorted(host.loaded) == ["s1", "s2"]
        assert "refill" not in loader.statistics().loads
    finally:
        await loader.close()
