"""What logging every request costs: throughput with the payload log off, and at 100 % sampling
to JSONL and to Parquet, side by side in one run, with what the log wrote and dropped.

    flock /tmp/bench.lock .venv/bin/python bench/payload_log.py [--rounds 3] [--window-ms 4000]
        [--concurrency 32] [--protocol grpc] [--model simple] [--configs off,jsonl,parquet]
        [--perf-analyzer PATH]

For each configuration it starts ``inferd serve`` on the example repository (only ``--model``
loaded), drives it with perf_analyzer at ``--concurrency`` (perf_analyzer's own random data,
its stability rule: three windows within 50 %), then reads the server's dropped-request
counters (queue full, write errors) and, once it has stopped, counts the records and bytes in
its files. Rounds are interleaved (off, JSONL, Parquet, then JSONL, Parquet, off, ...: each
round starts one configuration later) so drift hits every configuration alike; the figures are
the medians of the rounds, with the spread of throughput, and ("paired") the median over rounds
of each round's throughput against the same round's log-off throughput. Besides throughput it
prints perf_analyzer's p99 latency (the log encodes on the event loop, a chunk at a time: a
pause every few hundred requests) and the server's CPU time per request (its
``process_cpu_seconds_total`` over the requests it answered during the run), which a machine
shared with other work disturbs less, and the parts of it the log spent encoding on the event
loop and writing on its writer thread (``inferd_payload_log_encode_cpu_seconds_total``,
``..._writer_cpu_seconds_total``). The goal:
at 100 % sampling the throughput stays within 5 % of logging off, and nothing is dropped while
the disk keeps up. ``--model fraud_xgboost`` measures a request that costs more than
``simple``'s.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from generators import PERF_ANALYZER  # bench/ is on sys.path: the script's own folder

from inferd.examples.build import build_examples
from inferd.testing import running_server

#: name -> the server's payload log flags (every one but "off" logs 100 % of the requests)
CONFIGS = {
    "off": [],
    "jsonl": ["--payload-log-format=jsonl"],
    "parquet": ["--payload-log-format=parquet"],
}
COUNTER = re.compile(r'^(inferd_payload_log_\w+)\{model="[^"]*"(?:,reason="(\w+)")?\} (\S+)$')
PLAIN = re.compile(
    r"^(process_cpu_seconds_total|nv_inference_request_success"
    r"|inferd_payload_log_writer_cpu_seconds_total|inferd_payload_log_encode_cpu_seconds_total)"
    r"\{?[^ ]*\}? (\S+)$"
)


def _perf_analyzer(
    binary: Path, url: str, protocol: str, model: str, args: argparse.Namespace
) -> tuple[float, float]:
    """Throughput (infer/s) and p99 latency (ms) at ``--concurrency``."""
    csv = Path(tempfile.mkdtemp(prefix="pa-")) / "out.csv"
    cmd = [
        str(binary),
        "-m",
        model,
        "-u",
        url,
        "-i",
        protocol,
        "--concurrency-range",
        str(args.concurrency),
        "-p",
        str(args.window_ms),
        "-s",
        "50",
        "-r",
        "10",
        "-f",
        str(csv),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0 or not csv.exists():
        raise RuntimeError(f"perf_analyzer failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    header, row = csv.read_text().splitlines()[:2]
    values = dict(zip(header.split(","), row.split(","), strict=False))
    return float(values["Inferences/Second"]), float(values["p99 latency"]) / 1000


def _counters(metrics_url: str) -> dict[str, float]:
    """The payload log's counters, the server's CPU seconds and its successful requests."""
    text = urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=10).read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = COUNTER.match(line)
        if match:
            name, reason, value = match.groups()
            key = f"{name}:{reason}" if reason else name
            found[key] = found.get(key, 0.0) + float(value)
            continue
        plain = PLAIN.match(line)
        if plain:
            found[plain.group(1)] = found.get(plain.group(1), 0.0) + float(plain.group(2))
    return found


def _records(logs: Path) -> int:
    import pyarrow.parquet as pq

    lines = sum(p.read_bytes().count(b"\n") for p in logs.rglob("*.jsonl"))
    return lines + sum(pq.ParquetFile(p).metadata.num_rows for p in logs.rglob("*.parquet"))


def _run(
    repo: Path, name: str, flags: list[str], args: argparse.Namespace, binary: Path
) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="payload-bench-") as logs:
        serve = [
            "--model-control-mode=explicit",
            f"--load-model={args.model}",
            *([f"--payload-log={logs}", *flags] if flags else []),
        ]
        with running_server([repo], serve) as server:
            url = server.grpc_url if args.protocol == "grpc" else server.http_url
            before = _counters(server.metrics_url)
            throughput, p99 = _perf_analyzer(binary, url, args.protocol, args.model, args)
            counters = _counters(server.metrics_url)
        # counted in the files once the server has stopped (and so written everything)
        written = sum(p.stat().st_size for p in Path(logs).rglob("*") if p.is_file())
        logged = _records(Path(logs))

    def grown(name: str) -> float:
        return counters.get(name, 0.0) - before.get(name, 0.0)

    cpu = grown("process_cpu_seconds_total")
    served = max(grown("nv_inference_request_success"), 1.0)
    return {
        "throughput": throughput,
        "p99_ms": p99,
        "cpu_us": cpu / served * 1e6,
        "writer_us": grown("inferd_payload_log_writer_cpu_seconds_total") / served * 1e6,
        "encode_us": grown("inferd_payload_log_encode_cpu_seconds_total") / served * 1e6,
        "logged": float(logged),
        "dropped": counters.get("inferd_payload_log_dropped_total:queue_full", 0.0)
        + counters.get("inferd_payload_log_dropped_total:write_error", 0.0),
        "bytes": float(written),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-ms", type=int, default=4000, help="perf_analyzer's -p")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument(
        "--model",
        default="simple",
        help="a model of the example repository (simple: the cheapest request; fraud_xgboost: "
        "a realistic one, 20 features through dynamic batching and XGBoost)",
    )
    parser.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help="the configurations to run, comma-separated (default: all)",
    )
    parser.add_argument("--perf-analyzer", default=None, help="perf_analyzer binary")
    args = parser.parse_args()
    binary = Path(args.perf_analyzer) if args.perf_analyzer else PERF_ANALYZER
    names = args.configs.split(",")
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown or "off" not in names:
        raise SystemExit(
            f"--configs {args.configs!r}: name 'off' and any of " + ", ".join(list(CONFIGS)[1:])
        )
    if not binary.exists():
        raise SystemExit(f"no perf_analyzer at {binary}: pass --perf-analyzer or set PERF_ANALYZER")

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        build_examples(repo, force=True, progress=False)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        for round_ in range(args.rounds):
            # each round starts one configuration later, so none always runs first
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                result = _run(repo, name, CONFIGS[name], args, binary)
                results[name].append(result)
                print(
                    f"round {round_ + 1} {name:13s} {result['throughput']:9.1f} infer/s  "
                    f"p99 {result['p99_ms']:5.1f} ms  "
                    f"{result['cpu_us']:6.1f} CPU us/request (encode {result['encode_us']:5.1f}, "
                    f"writer {result['writer_us']:5.1f})  "
                    f"logged {result['logged']:.0f}  dropped {result['dropped']:.0f}",
                    flush=True,
                )
    base = statistics.median(r["throughput"] for r in results["off"])
    base_cpu = statistics.median(r["cpu_us"] for r in results["off"])
    print(
        f"\n{args.model} over {args.protocol}, concurrency {args.concurrency}, "
        f"median of {args.rounds} rounds"
    )
    head = (
        "payload log",
        "infer/s",
        "vs off",
        "paired",
        "spread",
        "p99 ms",
        "CPU us/req",
        "vs off",
        "encode",
        "writer",
        "logged",
        "dropped",
        "MB",
    )
    widths = (14, 10, 8, 8, 13, 7, 11, 8, 7, 7, 10, 8, 8)
    pairs = enumerate(zip(head, widths, strict=True))
    print(" ".join(f"{h:{'' if i == 0 else '>'}{w}s}" for i, (h, w) in pairs))
    for name, rounds in results.items():
        throughputs = [r["throughput"] for r in rounds]
        throughput = statistics.median(throughputs)
        spread = f"{min(throughputs):.0f}-{max(throughputs):.0f}"
        # each round against the same round's "off": a burst of other work spoils one round
        paired = statistics.median(
            r["throughput"] / off["throughput"] - 1
            for r, off in zip(rounds, results["off"], strict=True)
        )
        cpu = statistics.median(r["cpu_us"] for r in rounds)
        p99 = statistics.median(r["p99_ms"] for r in rounds)
        writer = statistics.median(r["writer_us"] for r in rounds)
        encoding = statistics.median(r["encode_us"] for r in rounds)
        logged = sum(r["logged"] for r in rounds)
        dropped = sum(r["dropped"] for r in rounds)
        written = sum(r["bytes"] for r in rounds) / 1e6
        print(
            f"{name:14s} {throughput:10.1f} {throughput / base - 1:+8.1%} {paired:+8.1%} "
            f"{spread:>13s} {p99:7.1f} "
            f"{cpu:11.1f} {cpu / base_cpu - 1:+8.1%} {encoding:7.1f} {writer:7.1f} "
            f"{logged:10.0f} {dropped:8.0f} {written:8.1f}"
        )


if __name__ == "__main__":
    main()
