"""What a ``/metrics`` scrape costs the requests being served beside it, with many models.

A server holds the 300 small models of ``bench/many_models_mixed.py`` (ONNX MLPs, XGBoost and
LightGBM boosters, every one loaded and asked once, so each has its counters and histograms).
``--clients`` closed-loop clients then ask the ten most popular of them for ``--seconds``,
twice, side by side in one run: once with nobody scraping, once with a scraper reading
``/metrics`` every ``--every-s`` seconds from a process of its own (Prometheus scrapes every
15-60 s; the mixed benchmark's sampler read it twice a second). Printed: the scrape's size and
time, and the requests' rate, p50, p99, p99.9 and slowest latency in both phases, with the
ratios. ``PYTHONPATH=<another checkout>/src`` runs another version of the server the same way.

    .venv/bin/python bench/metrics_scrape.py [--models 300] [--every-s 0.5] [--seconds 15]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import many_models_mixed as mixed  # this script's folder comes first on sys.path
import numpy as np
import tritonclient.http as httpclient

from inferd.testing import running_server


def drive(
    url: str, names: list[str], kinds: dict[str, str], clients: int, seconds: float
) -> list[float]:
    """Closed-loop clients over ``names`` for ``seconds``: every request's latency."""
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def loop(k: int) -> None:
        mine: list[float] = []
        with httpclient.InferenceServerClient(url) as client:
            made = {kind: mixed.inputs(kind) for kind in set(kinds.values())}
            j = k
            while time.monotonic() < stop:
                name = names[j % len(names)]
                j += 1
                t0 = time.perf_counter()
                client.infer(name, made[kinds[name]])
                mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


#: scrape ``argv[1]`` every ``argv[2]`` seconds until terminated; a line per scrape: bytes, seconds
SCRAPER = """
import signal, sys, time, urllib.request
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
url, every = sys.argv[1], float(sys.argv[2])
while True:
    time.sleep(every)
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://{url}/metrics", timeout=60) as reply:
        size = len(reply.read())
    print(size, time.perf_counter() - t0, flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=300, help="small models loaded")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=15.0, help="each phase's length")
    ap.add_argument("--every-s", type=float, default=0.5, help="seconds between scrapes")
    args = ap.parse_args()
    build_args = argparse.Namespace(mlp_hidden=1024, trees=150, tree_runtime="native")
    with tempfile.TemporaryDirectory(prefix="inferd-metrics-scrape-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        kinds = mixed.build(repo, args.models, 0, build_args)
        names = sorted(kinds)
        flags = ["--model-control-mode", "explicit", "--load-model", "*", "--log-verbose", "0"]
        with running_server([repo], flags, startup_timeout_s=900) as server:
            with httpclient.InferenceServerClient(server.http_url, concurrency=4) as client:
                for name in names:  # every model gets its counters and histograms
                    client.infer(name, mixed.inputs(kinds[name]))
            hot = names[:: max(1, len(names) // 10)][:10]
            drive(server.http_url, hot, kinds, args.clients, 2.0)  # warm the clients' path
            quiet = drive(server.http_url, hot, kinds, args.clients, args.seconds)
            # the scraper runs in its own process: in this one it would hold up the clients
            scraper = subprocess.Popen(
                [sys.executable, "-c", SCRAPER, server.metrics_url, str(args.every_s)],
                stdout=subprocess.PIPE,
                text=True,
            )
            busy = drive(server.http_url, hot, kinds, args.clients, args.seconds)
            scraper.terminate()
            out, _ = scraper.communicate()
            scrapes = [(int(a), float(b)) for a, b in (line.split() for line in out.splitlines())]

    def row(label: str, values: list[float]) -> str:
        ms = np.array(values) * 1e3
        return (
            f"{label:28s} {len(ms) / args.seconds:8.0f} {np.percentile(ms, 50):8.2f} "
            f"{np.percentile(ms, 99):8.2f} {np.percentile(ms, 99.9):8.2f} {ms.max():8.1f}"
        )

    sizes = [s for s, _ in scrapes]
    times = np.array([t for _, t in scrapes]) * 1e3
    print(
        f"{args.models} models loaded, {args.clients} clients on 10 of them, "
        f"{args.seconds:g} s per phase"
    )
    print(
        f"/metrics: {len(scrapes)} scrapes every {args.every_s:g} s, {np.median(sizes) / 1e6:.2f} "
        f"MB each, p50 {np.percentile(times, 50):.0f} ms, slowest {times.max():.0f} ms"
    )
    heads = ("requests/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms")
    print(f"{'phase':28s} " + " ".join(f"{h:>8s}" for h in heads))
    print(row("no scrapes", quiet))
    print(row(f"scraped every {args.every_s:g} s", busy))
    ratios = [np.percentile(busy, q) / np.percentile(quiet, q) for q in (99, 99.9)]
    print(
        f"scraped / not: p99 {ratios[0]:.2f}, p99.9 {ratios[1]:.2f}, requests/s "
        f"{len(busy) / len(quiet):.2f}"
    )


if __name__ == "__main__":
    main()
