"""Profile `inferd serve` under load with py-spy and say where the time goes.

    .venv/bin/python bench/profile_server.py mlp-on [--client wrk|grpc|http-binary] [-c 32] [-s 10]

Starts inferd on bench/.work/repos/<repo>, drives it (wrk with the v2 JSON body, or perf_analyzer
over gRPC or HTTP binary) and records every thread with `py-spy record --format raw` (needs
`pip install py-spy` in the project venv). It prints the functions with the most samples,
inclusive and self, for the event-loop thread and for the instance threads, and keeps the raw
stacks in bench/.work/profile/ (load them into speedscope or flamegraph.pl).
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import threading
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import generators  # noqa: E402
import models as bench_models  # noqa: E402
import run as bench_run  # noqa: E402

OUT = bench_run.WORK / "profile"


def summarize(raw: Path, top: int = 25) -> str:
    """py-spy raw output: 'thread (tid);frame;frame;... count' per line, root first."""
    inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    own: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    totals: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        thread = frames[0]
        group = "instance threads" if "inferd-" in thread else "event loop / other"
        n = int(count)
        totals[group] += n
        for frame in set(frames[1:]):
            inclusive[group][frame] += n
        if len(frames) > 1:
            own[group][frames[-1]] += n
    lines: list[str] = []
    for group in sorted(totals):
        lines.append(f"\n## {group}: {totals[group]} samples")
        lines.append("inclusive:")
        for frame, n in inclusive[group].most_common(top):
            lines.append(f"  {100 * n / totals[group]:5.1f}%  {frame}")
        lines.append("self:")
        for frame, n in own[group].most_common(top):
            lines.append(f"  {100 * n / totals[group]:5.1f}%  {frame}")
    return "\n".join(lines)


def summarize_per_process(raw: Path, top: int = 10) -> str:
    """Per process and thread: samples (on-CPU share) and the hottest leaf functions."""
    if not raw.exists():
        return "(py-spy wrote no samples)"
    per_key: collections.Counter[str] = collections.Counter()
    leaves: dict[str, collections.Counter[str]] = {}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        # with --subprocesses a worker's stack starts server;zygote;worker: keep the innermost
        procs = [i for i, f in enumerate(frames) if f.startswith("process ")]
        inner = frames[procs[-1]] if procs else "?"
        pid, _, cmd = inner.removeprefix("process ").partition(":")
        rest = frames[procs[-1] + 1 :] if procs else frames
        thread = rest[0] if rest and rest[0].startswith("thread ") else ""
        label = " ".join(Path(t).name for t in cmd.strip(chr(34)).split()[:3])
        key = f"pid {pid} ({label}) {thread}".strip()
        per_key[key] += int(count)
        leaves.setdefault(key, collections.Counter())[frames[-1]] += int(count)
    out = []
    for key, total in per_key.most_common():
        out.append(f"{key}: {total} samples")
        for leaf, n in leaves[key].most_common(top):
            out.append(f"    {100 * n / total:5.1f}%  {leaf}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("repo", help="a repository under bench/.work/repos, e.g. mlp-on")
    parser.add_argument("--client", default="wrk", choices=["wrk", "grpc", "http-binary"])
    parser.add_argument("-c", "--concurrency", type=int, default=32)
    parser.add_argument("-s", "--seconds", type=int, default=10)
    parser.add_argument("--idle", action="store_true", help="also sample idle threads")
    args = parser.parse_args()
    model = args.repo.rsplit("-", 1)[0]
    OUT.mkdir(parents=True, exist_ok=True)
    inputs = bench_models.model_inputs(model)
    body = OUT / f"{model}-body.json"
    body.write_text(bench_run.v2_json_body(inputs))
    data = bench_run.perf_analyzer_data(inputs, OUT / f"{model}-data.json")
    inferd = Path(sys.executable).parent / "inferd"
    cmd = [
        str(inferd),
        "serve",
        "--model-repository",
        str(bench_models.REPOS / args.repo),
        "--http-port",
        "18000",
        "--grpc-port",
        "18001",
        "--metrics-port",
        "18002",
    ]
    raw = OUT / f"{args.repo}-{args.client}-c{args.concurrency}.txt"
    with generators.process(
        cmd, f"http://127.0.0.1:18000/v2/models/{model}/ready", OUT / "inferd.log"
    ) as proc:
        spy = [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "--pid",
            str(proc.pid),
            "--format",
            "raw",
            "--threads",
            "--rate",
            "250",
            "-d",
            str(args.seconds + 1),
            "-o",
            str(raw),
        ] + (["--idle"] if args.idle else [])
        recorder = subprocess.Popen(spy, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        result: dict[str, object] = {}

        def load() -> None:
            if args.client == "wrk":
                result.update(
                    generators.wrk(
                        f"http://127.0.0.1:18000/v2/models/{model}/infer",
                        body,
                        args.concurrency,
                        args.seconds,
                        OUT,
                    )
                )
            else:
                protocol, url = (
                    ("grpc", "127.0.0.1:18001")
                    if args.client == "grpc"
                    else ("http", "127.0.0.1:18000")
                )
                result.update(
                    generators.perf_analyzer(
                        model, url, protocol, "binary", args.concurrency, data, 2000, 4, OUT
                    )
                )

        driver = threading.Thread(target=load)
        driver.start()
        driver.join()
        recorder.wait()
    print(f"load: {result}")
    print(f"raw stacks: {raw}")
    print(summarize(raw))


if __name__ == "__main__":
    main()
