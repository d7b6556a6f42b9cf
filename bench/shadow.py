"""What a shadow costs the caller: the primary's latency at concurrency 1 with no traffic
policy, with a policy on another model, and with a shadow of every request to another version,
side by side in one run.

    flock /tmp/bench.lock .venv/bin/python bench/shadow.py [--rounds 15] [--requests 300]
        [--model digits]

One ``inferd serve`` holds two copies of the example model (``--model``, versions 1 and 2 of
the same files, and a second model ``other`` alike). The configurations are switched over the
admin API between rounds, in an order that rotates each round (so drift on a shared machine
hits them alike):

* ``no policy``: requests to the model, no policy anywhere (one dictionary lookup per request);
* ``policy elsewhere``: a split policy on ``other``, requests to the model (what every
  request pays once the server has any policy);
* ``shadow 100%``: a shadow policy on the model, version 1 answering and every request copied
  to version 2 in the background (the copies started 8 at a time, the default);
* ``shadow, batch 1``: the same with ``batch: 1``, each copy started as soon as its request is
  answered.

A client on one keep-alive connection sends the same JSON request back to back and times each
answer (the first 20 after a switch are not counted). The figures are p50 and p99 over every
round's requests, and the median over rounds of each round's p50 against the same round's
``no policy`` p50 (paired, so a burst of other work on the machine spoils one round, not the
comparison). The goal: the shadow adds at most 10 % to the primary's p50, and
``policy elsewhere`` matches ``no policy``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from inferd.testing import running_server

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "models"
TOKEN = "bench-token"
CONFIGS = ("no policy", "policy elsewhere", "shadow 100%", "shadow, batch 1")


def _repository(model: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix="bench-shadow-"))
    for name in (model, "other"):
        target = root / name
        shutil.copytree(EXAMPLES / model, target)
        shutil.copytree(target / "1", target / "2")
        config = target / "config.pbtxt"
        text = config.read_text().replace(f'name: "{model}"', f'name: "{name}"')
        config.write_text(text + "\nversion_policy: { all { } }\n")
    (root / "token").write_text(TOKEN)
    return root


def _admin(conn: http.client.HTTPConnection, method: str, path: str, body: object) -> None:
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, path, data, {"Authorization": f"Bearer {TOKEN}"})
    reply = conn.getresponse()
    reply.read()
    if reply.status not in (200, 404):
        raise RuntimeError(f"{method} {path}: HTTP {reply.status}")


def _configure(conn: http.client.HTTPConnection, model: str, config: str) -> None:
    _admin(conn, "DELETE", f"/v2/models/{model}/rollout", None)
    _admin(conn, "DELETE", "/v2/models/other/rollout", None)
    if config == "policy elsewhere":
        split = {"variants": [{"version": 1, "weight": 1}, {"version": 2, "weight": 1}]}
        _admin(conn, "PUT", "/v2/models/other/rollout", {"kind": "split", **split})
    elif config.startswith("shadow"):
        shadow: dict[str, object] = {"primary": {"version": 1}, "shadow": {"version": 2}}
        if config == "shadow, batch 1":
            shadow["batch"] = 1
        _admin(conn, "PUT", f"/v2/models/{model}/rollout", {"kind": "shadow", **shadow})


def _body(model_dir: Path) -> bytes:
    """One request of the model's first input, random values of its shape (batch 1)."""
    text = (model_dir / "config.pbtxt").read_text()
    dims = [int(d) for d in text.split("dims: [", 1)[1].split("]", 1)[0].split(",")]
    name = text.split("input [", 1)[1].split('name: "', 1)[1].split('"', 1)[0]
    values = np.random.default_rng(0).uniform(0, 16, int(np.prod(dims))).round(2).tolist()
    tensor = {"name": name, "shape": [1, *dims], "datatype": "FP32", "data": values}
    return json.dumps({"inputs": [tensor]}).encode()


def _round(conn: http.client.HTTPConnection, path: str, body: bytes, n: int) -> list[float]:
    times: list[float] = []
    headers = {"Content-Type": "application/json"}
    for _ in range(n):
        start = time.perf_counter()
        conn.request("POST", path, body, headers)
        reply = conn.getresponse()
        reply.read()
        times.append(time.perf_counter() - start)
        if reply.status != 200:
            raise RuntimeError(f"inference failed: HTTP {reply.status}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--requests", type=int, default=300, help="per configuration and round")
    parser.add_argument("--model", default="digits", help="an FP32 model of examples/models")
    args = parser.parse_args()
    root = _repository(args.model)
    flags = ["--admin-token-file", str(root / "token")]
    samples: dict[str, list[float]] = {c: [] for c in CONFIGS}
    round_p50: dict[str, list[float]] = {c: [] for c in CONFIGS}
    mirrored = 0
    with running_server([root], flags) as server:
        host, port = server.http_url.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        body = _body(root / args.model)
        path = f"/v2/models/{args.model}/infer"
        _round(conn, path, body, 200)  # warm up
        for r in range(args.rounds):
            for i in range(len(CONFIGS)):
                config = CONFIGS[(i + r) % len(CONFIGS)]
                _configure(conn, args.model, config)
                _round(conn, path, body, 20)  # settle after the switch
                times = _round(conn, path, body, args.requests)
                samples[config] += times
                round_p50[config].append(statistics.median(times))
                if config.startswith("shadow"):
                    conn.request("GET", f"/v2/models/{args.model}/rollout")
                    report = json.loads(conn.getresponse().read())
                    mirrored += report["variants"][1].get("mirrored", {}).get("requests", 0)
        conn.close()
    shutil.rmtree(root, ignore_errors=True)
    base = round_p50["no policy"]
    print(f"model {args.model}, concurrency 1, {args.rounds} rounds x {args.requests} requests")
    print(f"{'configuration':<18}{'p50 ms':>9}{'p99 ms':>9}{'p50 vs none':>13}{'(rounds)':>20}")
    for config in CONFIGS:
        values = np.array(samples[config]) * 1e3
        p50, p99 = np.percentile(values, [50, 99])
        ratios = [mine / none for mine, none in zip(round_p50[config], base, strict=True)]
        low, high = min(ratios) - 1, max(ratios) - 1
        paired = statistics.median(ratios) - 1
        print(f"{config:<18}{p50:>9.3f}{p99:>9.3f}{paired:>+12.1%}  ({low:+.1%} .. {high:+.1%})")
    sent = args.rounds * (args.requests + 20)
    print(f"shadow answers counted: {mirrored} of the {2 * sent} requests sent with a shadow on")


if __name__ == "__main__":
    main()
