"""The same resident models, two histories: what loading and unloading costs the process.

A server serves the mixed benchmark's Zipf traffic within a memory budget (its models loaded
and unloaded on demand, as in ``many_models_mixed.py``); when the traffic stops, the script
notes the models it holds. A fresh server then loads exactly those models, one request each.
Both hold the same models, libraries and baseline, so the difference between their resident
sets is what the first one's history left behind. Each resident set is split by kind of
mapping (``/proc/PID/smaps``) and, where ``gdb`` is installed, glibc's own statistics
(``malloc_stats``) split the heap into memory in use and free memory still resident.

    .venv/bin/python bench/many_models_history.py [--budget-mib 863] [--seconds 60]
        [--kinds onnx,xgboost,lightgbm,minilm] [--clients 32]

The default budget is what ``many_models_mixed.py`` computed for its default mix on a 2-core
machine (a fifth of the models' bytes, plus the baseline and the runtimes' libraries). Results:
docs/multi-model.md, "The same models, two histories".
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import tritonclient.http as httpclient
from many_models_mixed import build, drive, inputs, popularity  # this script's folder

from inferd.repository.memory import process_tree_rss
from inferd.testing import ServerProcess, running_server

MIB = 1 << 20
PYMALLOC_ARENA = 1 << 20  # Python 3.10+: obmalloc's arenas are 1 MiB mappings
ARENA_HEAP = 64 << 20  # glibc's secondary arenas grow in 64 MiB-aligned heaps (64-bit)


def mapping_kind(start: int, size: int, perms: str, path: str) -> str:
    if path == "[heap]":
        return "glibc heap (main arena)"
    if path.startswith("/"):
        return "files (libraries' code, mapped files)"
    if path.startswith("["):
        return "other"
    if size == PYMALLOC_ARENA:
        return "Python's allocator (1 MiB arenas)"
    if perms.startswith("rw") and start % ARENA_HEAP == 0 and size <= ARENA_HEAP:
        return "glibc heap (other arenas)"
    if perms.startswith("rw") and abs(size - (8 << 20)) <= 2 * 4096:
        return "thread stacks"
    return "other anonymous (large blocks mapped apart)"


def resident_by_kind(pid: int) -> Counter[str]:
    """Resident bytes of a process by kind of mapping."""
    out: Counter[str] = Counter()
    kind = "other"
    head = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \d+\s*(.*)$")
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        match = head.match(line)
        if match:
            start, end = int(match[1], 16), int(match[2], 16)
            kind = mapping_kind(start, end - start, match[3], match[4].strip())
        elif line.startswith("Rss:"):
            out[kind] += int(line.split()[1]) * 1024
    return out


def malloc_in_use(server: ServerProcess) -> int | None:
    """glibc's bytes in use, mapped blocks included (``malloc_stats`` through gdb, printed
    into the server's log); None without gdb."""
    if shutil.which("gdb") is None:
        return None
    before = server.log()
    subprocess.run(
        ["gdb", "-p", str(server.pid), "-batch", "-ex", "call (void) malloc_stats()"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    for _ in range(50):
        new = server.log()[len(before) :]
        match = re.search(
            r"Total \(incl\. mmap\):\s*system bytes\s*=\s*\d+\s*in use bytes\s*=\s*(\d+)", new
        )
        if match:
            return int(match[1])
        time.sleep(0.1)
    return None


def resident_models(server: ServerProcess) -> list[str]:
    with httpclient.InferenceServerClient(server.http_url) as client:
        index = client.get_model_repository_index()
    return sorted(e["name"] for e in index if e.get("on_demand") == "resident")


def picture(server: ServerProcess) -> dict[str, Any]:
    kinds = resident_by_kind(server.pid)
    heap = sum(v for k, v in kinds.items() if k.startswith("glibc") or k.startswith("other anon"))
    in_use = malloc_in_use(server)
    status = Path(f"/proc/{server.pid}/status").read_text()
    threads = int(re.search(r"^Threads:\s*(\d+)", status, re.MULTILINE)[1])  # type: ignore[index]
    return {
        "rss": process_tree_rss(server.pid),
        "kinds": kinds,
        "in_use": in_use,
        "free_resident": None if in_use is None else heap - in_use,
        "threads": threads,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-mib", type=float, default=863.0, help="the first server's budget")
    ap.add_argument("--seconds", type=float, default=60.0, help="traffic within the budget")
    ap.add_argument("--kinds", default="onnx,xgboost,lightgbm,minilm", help="kinds of models kept")
    ap.add_argument("--small", type=int, default=300, help="tabular models built")
    ap.add_argument("--large", type=int, default=10, help="MiniLM copies built")
    ap.add_argument("--clients", type=int, default=32, help="closed-loop clients")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mlp-hidden", type=int, default=1024, help="the ONNX MLPs' width")
    ap.add_argument("--trees", type=int, default=150, help="trees per tree model")
    ap.add_argument("--tree-runtime", choices=("native", "onnx"), default="native")
    args = ap.parse_args()
    keep = set(args.kinds.split(","))

    with tempfile.TemporaryDirectory(prefix="inferd-many-history-") as tmp:
        repo = Path(tmp)
        print("building the repository (the MiniLM export the first time)...", flush=True)
        kinds = build(repo, args.small, args.large if "minilm" in keep else 0, args)
        for name, kind in list(kinds.items()):
            if kind not in keep:
                shutil.rmtree(repo / name)
                del kinds[name]
        order, weights = popularity(sorted(kinds), 1.1, args.seed)
        on_demand = ["--model-control-mode", "on-demand", "--log-verbose", "0"]
        on_demand += ["--model-load-wait-secs", "300"]
        budget = ["--model-memory-budget", str(int(args.budget_mib * MIB))]

        print(f"{args.seconds:g} s of traffic within {args.budget_mib:g} MiB...", flush=True)
        with running_server([repo], [*on_demand, *budget]) as server:
            traffic = drive(
                server, kinds, [(args.seconds, order, weights)], args.clients, args.seed
            )
            time.sleep(3)  # the last loads and unloads settle
            held = resident_models(server)
            churned = picture(server)
        print(f"a fresh server loads the {len(held)} models the first one held...", flush=True)
        with running_server([repo], [*on_demand, "--model-memory-budget", "100%"]) as server:
            made = {kind: inputs(kind) for kind in set(kinds.values())}
            with httpclient.InferenceServerClient(server.http_url) as client:
                for name in held:
                    client.infer(name, made[kinds[name]])
            time.sleep(3)
            fresh = picture(server)
            assert resident_models(server) == held, "the fresh server holds other models"

    count = Counter(kinds[n] for n in held)
    print(
        f"{len(traffic.requests)} requests ({len(traffic.failures)} failed) in {args.seconds:g} s "
        f"within {args.budget_mib:g} MiB; then resident: {len(held)} models "
        f"({', '.join(f'{k} {v}' for k, v in sorted(count.items()))})"
    )
    rows = [("resident set", "rss"), ("threads", "threads")]
    print("\n| | after the traffic | fresh, same models | difference |\n|---|---|---|---|")
    for label, key in rows:
        a, b = churned[key], fresh[key]
        unit = MIB if key == "rss" else 1
        print(f"| {label} | {a / unit:.0f} | {b / unit:.0f} | {(a - b) / unit:+.0f} |")
    for kind in sorted(set(churned["kinds"]) | set(fresh["kinds"])):
        a, b = churned["kinds"][kind], fresh["kinds"][kind]
        print(f"| {kind} | {a / MIB:.1f} | {b / MIB:.1f} | {(a - b) / MIB:+.1f} |")
    for label, key in (
        ("glibc: in use", "in_use"),
        ("glibc: free, still resident", "free_resident"),
    ):
        a, b = churned[key], fresh[key]
        if a is None or b is None:
            print(f"| {label} | (no gdb) | | |")
        else:
            print(f"| {label} | {a / MIB:.1f} | {b / MIB:.1f} | {(a - b) / MIB:+.1f} |")
    print("\n(MiB; glibc's figures: malloc_stats, heap mappings and large blocks mapped apart)")


if __name__ == "__main__":
    main()
