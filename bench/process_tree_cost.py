"""What one resident-set measurement of the server's process tree costs: a scan of /proc for
the worker processes each time (``process_tree_rss``) against a scan only when a process or
thread was created since the last one (``ProcessTree``, what the on-demand loader uses).

    .venv/bin/python bench/process_tree_cost.py [--calls 500]
"""

from __future__ import annotations

import argparse
import os
import time

from inferd.repository.memory import ProcessTree, process_tree_rss


def per_call_ms(measure: object, calls: int) -> float:
    assert callable(measure)
    start = time.perf_counter()
    for _ in range(calls):
        measure()
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=500, help="measurements per variant")
    args = ap.parse_args()
    processes = sum(1 for entry in os.listdir("/proc") if entry.isdigit())
    tree = ProcessTree()
    scan = per_call_ms(process_tree_rss, args.calls)
    cached = per_call_ms(tree.rss, args.calls)
    print(f"{processes} processes on this machine, {args.calls} measurements each")
    print(f"  scan every time (process_tree_rss): {scan:.3f} ms a measurement")
    print(f"  scan when a process was created (ProcessTree): {cached:.3f} ms, {tree.scans} scans")
    print(f"  ratio: {scan / cached:.1f}x")


if __name__ == "__main__":
    main()
