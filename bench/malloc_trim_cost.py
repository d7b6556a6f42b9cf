"""What one ``malloc_trim(0)`` costs as glibc's heap fills with free chunks.

The on-demand loader trims around each unload (``inferd.repository.memory``); under churn the
heap holds thousands of free chunks between live allocations. This process allocates blocks
of 64 B to 20 KiB with ``malloc`` through ctypes, frees every other one (so the freed ones
cannot merge), then times two trims in a row (the second has nothing left to give back) at
each size. Linux and glibc only.

    .venv/bin/python bench/malloc_trim_cost.py
"""

from __future__ import annotations

import ctypes
import random
import time


def main() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    rng = random.Random(7)
    print("| free chunks | first trim | second trim |")
    print("|---|---|---|")
    for blocks in (2_000, 20_000, 100_000, 200_000):
        pointers = [libc.malloc(rng.choice((64, 500, 2_000, 5_000, 20_000))) for _ in range(blocks)]
        for p in pointers[::2]:
            libc.free(p)
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            libc.malloc_trim(0)
            times.append((time.perf_counter() - t0) * 1e3)
        print(f"| {blocks // 2:,} | {times[0]:.1f} ms | {times[1]:.1f} ms |")
        for p in pointers[1::2]:
            libc.free(p)
        libc.malloc_trim(0)


if __name__ == "__main__":
    main()
