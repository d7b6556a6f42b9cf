"""CPU per inference request of the front-end channel path, both ends in one process.

    .venv/bin/python bench/frontend_path.py [--requests 32000] [--concurrency 32]
                                            [--rounds 5] [--against DIR]

What ``--frontends K`` adds to a request besides HTTP or gRPC, measured without the network,
the model or a second process: :class:`EngineProxy` (the front end's ``infer``: the request
encoded, put on the ring, the reply read and decoded) and :class:`EngineBridge` (the engine's
side: the request read and decoded, a task, the response encoded and put on the ring) over a
real :func:`create_channel` channel, with an engine that answers at once (a 1x64 FP32 input, a
1x10 FP32 output: the small MLP's shapes). ``concurrency`` callers keep the rings loaded, as a
busy server does. Prints CPU microseconds per request (process time, the best of the repeats
in a round; the median over rounds, with the range).

``--against DIR`` also runs it on the source tree in DIR (another checkout, e.g. made with
``git worktree add /tmp/old HEAD``), alternating with this one in every round, each in a fresh
interpreter, and prints the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def measure(requests: int, concurrency: int, repeats: int = 3) -> float:
    """Seconds of CPU per request (the best of ``repeats``)."""
    import numpy as np
    import uvloop

    from inferd.core.inference import InferRequest, InferResponse
    from inferd.server.frontends import supervisor
    from inferd.server.frontends.bridge import EngineBridge
    from inferd.server.frontends.channel import create_channel
    from inferd.server.frontends.link import MessageLink
    from inferd.server.frontends.proxy import EngineProxy

    outputs = {"output": np.ones((1, 10), np.float32)}
    features = np.ones((1, 64), np.float32)

    class Answering:
        async def infer(self, request: InferRequest) -> InferResponse:
            return InferResponse(
                model_name=request.model_name, model_version="1", outputs=outputs, id=request.id
            )

    async def main() -> float:
        engine_end, spec = create_channel(supervisor.RING_SLOTS, supervisor.SLOT_BYTES)
        frontend_end = spec.open()
        log = logging.getLogger("bench")
        bridge = EngineBridge(Answering(), http_apps={}, servicer=None, log=log)
        proxy = EngineProxy(MessageLink(frontend_end, supervisor.SLOT_BYTES), log=log)
        engine_link = MessageLink(engine_end, supervisor.SLOT_BYTES)
        tasks = [
            asyncio.create_task(bridge.serve(engine_link, "bench")),
            asyncio.create_task(proxy.run()),
        ]

        async def caller(n: int) -> None:
            for _ in range(n):
                response = await proxy.infer(
                    InferRequest("mlp", {"input": features}, binary_output_default=True)
                )
                assert response.outputs["output"].shape == (1, 10)

        await asyncio.gather(*(caller(100) for _ in range(concurrency)))  # warm up
        best = float("inf")
        for _ in range(repeats):
            start = time.process_time()
            await asyncio.gather(*(caller(requests // concurrency) for _ in range(concurrency)))
            best = min(
                best, (time.process_time() - start) / (requests // concurrency * concurrency)
            )
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        frontend_end.close()
        engine_end.close()
        return best

    return uvloop.run(main())


def _run(tree: Path | None, args: argparse.Namespace) -> float:
    env = dict(os.environ)
    env["PYTHONPATH"] = str((tree or ROOT) / "src")
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--requests",
            str(args.requests),
            "--concurrency",
            str(args.concurrency),
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(out.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=32000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", type=Path, default=None, help="another source tree")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(measure(args.requests, args.concurrency))
        return
    trees: list[Path | None] = [None] if args.against is None else [args.against, None]
    results: dict[Any, list[float]] = {tree: [] for tree in trees}
    for _ in range(args.rounds):
        for tree in trees:
            results[tree].append(1e6 * _run(tree, args))
    print(
        f"front-end channel path, {args.concurrency} callers, {args.requests} requests, "
        f"{args.rounds} rounds (median, range), load average {os.getloadavg()[0]:.1f}"
    )
    for tree in trees:
        runs = results[tree]
        name = "this tree" if tree is None else f"tree {tree}"
        mid = statistics.median(runs)
        print(f"  {name}: {mid:.2f} µs CPU per request ({min(runs):.2f}-{max(runs):.2f})")
    if args.against is not None:
        ratio = statistics.median(results[None]) / statistics.median(results[args.against])
        print(f"  this tree against the other: x{ratio:.2f}")


if __name__ == "__main__":
    main()
