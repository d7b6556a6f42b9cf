"""What reading and writing a registered shared-memory region costs the server, per tensor:
the mapping that inferd used to keep (``mmap`` of the client's object, ``np.frombuffer`` over
it) against the descriptor it keeps now (``preadv`` into a fresh array, ``pwrite`` out).

    flock /tmp/bench.lock .venv/bin/python bench/shared_memory_copy.py [--repeats 200]

One POSIX object in ``/dev/shm`` per size, written once. For each tensor size, in one run and
interleaved (old, new, old, new, ...), the median of ``--repeats`` timings (a tenth of them
above 1 MiB) of:

- ``input``: what decoding one input costs: old, a size check and a read-only view of the
  mapping (no copy); new, ``SharedMemoryRegistry.read`` (one ``preadv`` into a fresh buffer);
- ``input + use``: the same, then one pass over the tensor (``sum``), as a model reads it: the
  old view reads the object's pages where they are, the new copy reads its own pages;
- ``output``: writing an output of that size into the region: old, ``np.copyto`` into the
  mapping; new, the writer ``SharedMemoryRegistry.writer`` returns (one ``pwrite``).

Printed: microseconds per operation for both and the ratio new / old.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from inferd.frontends.shared_memory import SHM_DIR, SharedMemoryRegistry

SIZES = (64, 4096, 64 << 10, 1 << 20, 16 << 20, 64 << 20)


def _label(size: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def _time_us(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e6


def _measure(registry: SharedMemoryRegistry, size: int, repeats: int) -> dict[str, list[float]]:
    """Median microseconds, old and new, of each operation on a tensor of ``size`` bytes."""
    name = f"inferd-bench-copy-{os.getpid()}-{size}"
    path = SHM_DIR / name
    data = np.random.default_rng(size).standard_normal(size // 4, dtype=np.float32)
    path.write_bytes(data.tobytes() * 2)  # an input half and an output half
    fd = os.open(path, os.O_RDWR)
    mapping = mmap.mmap(fd, 2 * size)
    try:
        registry.register(name, f"/{name}", 0, 2 * size)
        result = np.ones(size // 4, dtype=np.float32)
        write = registry.writer(name, size, size)

        def old_input() -> np.ndarray:
            if os.fstat(fd).st_size < size:  # the size check the old path made
                raise AssertionError("shrunk")
            return np.frombuffer(memoryview(mapping)[:size].toreadonly(), dtype=np.float32)

        def new_input() -> np.ndarray:
            return np.frombuffer(registry.read(name, 0, size), dtype=np.float32)

        def old_output() -> None:
            np.copyto(np.frombuffer(memoryview(mapping)[size:], dtype=np.float32), result)

        def new_output() -> None:
            write(result.view(np.uint8).data)

        pairs: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
            "input": (old_input, new_input),
            "input + use": (lambda: old_input().sum(), lambda: new_input().sum()),
            "output": (old_output, new_output),
        }
        np.testing.assert_array_equal(new_input(), old_input())
        figures: dict[str, list[float]] = {}
        for what, (old, new) in pairs.items():
            olds, news = [], []
            for _ in range(repeats):  # interleaved: drifting load hits both alike
                olds.append(_time_us(old))
                news.append(_time_us(new))
            figures[what] = [statistics.median(olds), statistics.median(news)]
        return figures
    finally:
        registry.unregister(name)
        mapping.close()
        os.close(fd)
        path.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200, help="per figure (default: 200)")
    args = parser.parse_args()
    registry = SharedMemoryRegistry(max_bytes=1 << 40)
    rows = []
    try:
        for size in SIZES:
            repeats = args.repeats if size <= 1 << 20 else max(10, args.repeats // 10)
            rows.append((size, _measure(registry, size, repeats)))
    finally:
        registry.close()
    _report(rows)
    return 0


def _report(rows: list[tuple[int, dict[str, list[float]]]]) -> None:
    print("microseconds per tensor, median, old (mmap view / copyto) vs new (preadv / pwrite)")
    header = f"{'size':>8}"
    for what in ("input", "input + use", "output"):
        header += f" | {what + ' old':>16}{'new':>10}{'new/old':>9}"
    print(header)
    for size, figures in rows:
        line = f"{_label(size):>8}"
        for what in ("input", "input + use", "output"):
            old, new = figures[what]
            line += f" | {old:>16.1f}{new:>10.1f}{new / old:>8.2f}x"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
