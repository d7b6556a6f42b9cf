"""What one submit costs on a direct scheduler, with no server and no codec around it.

    .venv/bin/python bench/submit_cost.py [--requests 20000] [--repeats 7]

Submits one small request at a time to a :class:`~inferd.scheduling.direct.DirectScheduler`
over one instance that echoes its input, and prints nanoseconds per submit in two modes:
``inline`` (the batch runs on the event loop thread; timed in the loop thread's CPU time, which
other processes on the machine disturb least) and ``threads`` (the batch goes to the instance's
thread and back; wall time). The best of ``--repeats`` rounds is printed. Run it on two
checkouts to compare the scheduler's own cost before and after a change.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.core.inference import InferRequest
from inferd.scheduling.direct import DirectScheduler
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.stats import ModelStats


class _Echo:
    inline_safe = True

    def execute(self, requests: Sequence[InferRequest]) -> list[Any]:
        return [{"OUTPUT0": r.inputs["INPUT0"]} for r in requests]

    def close(self) -> None:
        return None


async def _per_submit_ns(inline: bool, requests: int, repeats: int) -> float:
    loop = asyncio.get_running_loop()
    stats = ModelStats("echo", 1)
    pool = InstancePool("echo-1", [_Echo()], stats, loop, inline_bound_ns=10**12 if inline else 0)
    scheduler = DirectScheduler(pool, stats)
    request = InferRequest("echo", {"INPUT0": np.zeros((1, 2), np.float32)})
    clock = time.thread_time_ns if inline else time.perf_counter_ns
    for _ in range(2000):  # warm up (and, inline, measure the model)
        await scheduler.submit(request)
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        for _ in range(requests):
            await scheduler.submit(request)
        best = min(best, (clock() - start) / requests)
    await asyncio.to_thread(pool.close)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000, help="submits per round")
    parser.add_argument("--repeats", type=int, default=7, help="rounds; the best is printed")
    args = parser.parse_args()
    for inline in (True, False):
        ns = asyncio.run(_per_submit_ns(inline, args.requests, args.repeats))
        print(f"{'inline' if inline else 'threads':8s} {ns:8.0f} ns/submit")


if __name__ == "__main__":
    main()
