"""What a traffic policy's choice costs on the request path, with no server around it.

    flock /tmp/bench.lock .venv/bin/python bench/rollout_choice.py [--seconds 1]

Times, in microseconds per call (the best of three windows, after a warm-up):

* ``ThompsonSampler.choose()`` for 2, 3 and 4 arms, binary and continuous rewards, with the
  posteriors of a few hundred rewards per arm, without and with an exploration floor;
* for reference, the same binary choice drawn with Python's ``random.betavariate``, with numpy
  ``Generator.beta`` scalar calls (what ``choose()`` does), and with one vectorised
  ``Generator.beta`` call over the arms followed by ``argmax``;
* ``sticky.bucket()`` for a typical user id, ``sticky.pick()`` over 2 and 4 weights, and the two
  together (a sticky split's whole choice);
* ``LatencyWindow.add()``, and a p99 read of a full 2,048-value window;
* ``bayes.compare()`` at its default 20,000 draws (a report or a scrape, not the request path).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from inferd.rollout.bandit import ThompsonSampler
from inferd.rollout.bayes import RewardStats, compare
from inferd.rollout.latency import LatencyWindow
from inferd.rollout.sticky import bucket, pick


def per_call_us(fn: Callable[[], Any], seconds: float) -> float:
    warm_until = time.perf_counter() + min(0.2, seconds / 3)
    for _ in range(2000):  # a warm-up: 2,000 calls or 0.2 s, whichever ends first
        fn()
        if time.perf_counter() > warm_until:
            break
    best = float("inf")
    for _ in range(3):  # best of three windows: the least disturbed
        calls = 0
        start = time.perf_counter()
        deadline = start + seconds / 3
        while True:
            for _ in range(200):
                fn()
            calls += 200
            now = time.perf_counter()
            if now >= deadline:
                break
        best = min(best, (now - start) / calls)
    return best * 1e6


def trained(arms: int, kind: str, min_share: float) -> ThompsonSampler:
    names = [f"v{i}" for i in range(arms)]
    sampler = ThompsonSampler(names, kind=kind, seed=1, min_share=min_share)  # type: ignore[arg-type]
    world = random.Random(2)
    for i, name in enumerate(names):
        rate = 0.05 + 0.02 * i
        for _ in range(300):
            if kind == "binary":
                sampler.reward(name, 1.0 if world.random() < rate else 0.0)
            else:
                sampler.reward(name, world.gauss(rate * 10, 1.0))
    return sampler


def reference_choices(arms: int) -> dict[str, Callable[[], int]]:
    rnd = random.Random(1)
    rng = np.random.default_rng(1)
    alpha = [1.0 + 15.0 + 6.0 * i for i in range(arms)]
    beta = [1.0 + 285.0 - 6.0 * i for i in range(arms)]
    a, b = np.array(alpha), np.array(beta)

    def loop(draw: Callable[[float, float], float]) -> int:
        best, chosen = -1.0, 0
        for i in range(arms):
            x = draw(alpha[i], beta[i])
            if x > best:
                best, chosen = x, i
        return chosen

    return {
        "random.betavariate": lambda: loop(rnd.betavariate),
        "Generator.beta scalars": lambda: loop(rng.beta),
        "Generator.beta vector + argmax": lambda: int(np.argmax(rng.beta(a, b))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per figure")
    args = parser.parse_args()
    s = args.seconds
    rows: list[tuple[str, float]] = []
    for kind in ("binary", "continuous"):
        for arms in (2, 3, 4):
            rows.append(
                (f"choose() {kind}, {arms} arms", per_call_us(trained(arms, kind, 0).choose, s))
            )
    rows.append(
        (
            "choose() binary, 3 arms, min_share 0.05",
            per_call_us(trained(3, "binary", 0.05).choose, s),
        )
    )
    for arms in (2, 4):
        for name, fn in reference_choices(arms).items():
            rows.append((f"  reference: {name}, {arms} arms", per_call_us(fn, s)))
    user = "user-8c2f61a4-93d5-4f7e-b0a1-5d6e7f809a1b"
    rows.append(
        ("sticky.bucket(user id, salt)", per_call_us(lambda: bucket(user, "checkout-v2"), s))
    )
    two = [("primary", 0.9), ("candidate", 0.1)]
    four = [("a", 0.4), ("b", 0.3), ("c", 0.2), ("d", 0.1)]
    rows.append(("sticky.pick(2 weights)", per_call_us(lambda: pick(two, 0.95), s)))
    rows.append(("sticky.pick(4 weights)", per_call_us(lambda: pick(four, 0.95), s)))
    rows.append(("bucket + pick(2 weights)", per_call_us(lambda: pick(two, bucket(user, "x")), s)))
    window = LatencyWindow(2048)
    rows.append(("LatencyWindow.add()", per_call_us(lambda: window.add(0.0123), s)))
    rows.append(
        (
            "LatencyWindow(2048).percentile(99) (a read)",
            per_call_us(lambda: window.percentile(99.0), s),
        )
    )
    a, b = RewardStats(5000, 0.10, 450.0), RewardStats(5000, 0.11, 489.5)
    for kind in ("binary", "continuous"):
        rows.append((f"compare() {kind}", per_call_us(lambda: compare(a, b, kind=kind), s)))  # type: ignore[arg-type]  # noqa: B023
    width = max(len(name) for name, _ in rows)
    for name, us in rows:
        print(f"{name:<{width}}  {us:7.2f} us")


if __name__ == "__main__":
    main()
