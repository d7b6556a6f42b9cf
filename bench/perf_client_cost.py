"""What one process of ``inferd perf``'s network clients can send, beside perf_analyzer.

    flock /tmp/bench.lock .venv/bin/python bench/perf_client_cost.py [--seconds 4] [--json OUT]

Both load generators drive the canned-response server (bench/servers/canned.py, serving the
benchmark's small MLP: its answers are precomputed bytes, so the server does as little as a
server can) at concurrency 1 and 8, one after the other in the same run, with the same input
data: inferd's clients (``http-binary``, ``http-json``, ``grpc``, each in a fresh process on
uvloop, as ``inferd perf`` runs) and perf_analyzer with the matching flags. The canned server
answers unary calls only, so ``grpc-stream`` (perf_analyzer ``--streaming``) is measured against
``inferd serve`` on the same model: there the server, not the client, sets the throughput, and
the client's CPU per request is the figure to compare.
For each it prints requests per second and the client's CPU per request (the client's CPU
seconds over the requests it completed; perf_analyzer's over its whole run, start-up included,
so its figure is an upper bound; it runs windows of ``--seconds`` until three agree within
50 %). Client, server and anything else share the machine's cores:
the throughputs are comparable within a run, and the CPU per request says how much of a core
the load generator itself takes. Cores taken by other processes meanwhile are shown per cell.

perf_analyzer is found where bench/generators.py looks ($PERF_ANALYZER, ...); without it only
inferd's figures are printed.

Two more gRPC clients can join the same run: ``--grpc-aio`` adds grpcio's asyncio client sending
the same prepared bytes (no protobuf work: raw bytes in and out) for unary calls, and
``--old-src DIR`` runs inferd's gRPC cells a second time with ``DIR`` (another checkout's
``src``) first on PYTHONPATH, to set a change of the client beside the one before it.
``--transports`` keeps only the transports named (comma separated).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import cpu_share  # noqa: E402
import models as bench_models  # noqa: E402
from generators import PERF_ANALYZER, missing_generators, process  # noqa: E402

HOST = "127.0.0.1"
CANNED_PORTS = (18360, 18361)  # HTTP, gRPC
INFERD_PORTS = (18370, 18371)
MODEL = "mlp"
CONCURRENCY = (1, 8)
# inferd transport -> perf_analyzer protocol, tensor format ("" for gRPC), extra flags
PAIRS = {
    "http-binary": ("http", "binary", []),
    "http-json": ("http", "json", []),
    "grpc": ("grpc", "", []),
}
# the canned server answers unary calls only: streams are measured against `inferd serve`
STREAM_PAIRS = {"grpc-stream": ("grpc", "", ["--streaming"])}
SERVICE = "/inference.GRPCInferenceService/"


class AioChannel:
    """grpcio's asyncio client sending prepared ``ModelInferRequest`` bytes (no serialisers:
    bytes in, bytes out), one channel per context as inferd's clients have a connection each."""

    def __init__(self, target: str, wire: bytes) -> None:
        import grpc

        self._channel = grpc.aio.insecure_channel(target)
        self._call = self._channel.unary_unary(SERVICE + "ModelInfer")
        self._wire = wire

    async def infer(self, index: int) -> None:
        await self._call(self._wire)

    async def close(self) -> None:
        await self._channel.close()


# -- the inferd side: one worker process per cell ---------------------------------------------


async def _drive(
    transport_name: str, concurrency: int, seconds: float, data: Path, ports: tuple[int, int]
) -> dict[str, Any]:
    from inferd.tools.perf.grpc_client import GrpcTransport
    from inferd.tools.perf.http_client import HttpTransport
    from inferd.tools.perf.inputs import load_input_data
    from inferd.tools.perf.transport import Transport

    transport: Transport
    if transport_name.startswith("http"):
        transport = HttpTransport(
            f"{HOST}:{ports[0]}", MODEL, binary=transport_name == "http-binary"
        )
    else:
        transport = GrpcTransport(
            f"{HOST}:{ports[1]}", MODEL, streaming=transport_name == "grpc-stream"
        )
    info = await transport.model_info()
    await transport.prepare(load_input_data(info, data).requests, 1, None)
    channels: list[Any]
    if transport_name == "grpc-aio":
        assert isinstance(transport, GrpcTransport)
        target = f"{HOST}:{ports[1]}"
        channels = [AioChannel(target, transport.wires[0]) for _ in range(concurrency)]
    else:
        channels = [await transport.open_channel() for _ in range(concurrency)]
    counting = False
    done = 0
    stop = False

    async def loop(channel: Any) -> None:
        nonlocal done
        while not stop:
            await channel.infer(0)
            if counting:
                done += 1

    tasks = [asyncio.ensure_future(loop(c)) for c in channels]
    await asyncio.sleep(0.5)  # warm up: connections open, caches filled
    counting = True
    wall0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.sleep(seconds)
    counting = False
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    stop = True
    await asyncio.gather(*tasks)
    for channel in channels:
        await channel.close()
    await transport.close()
    return {"requests": done, "wall_s": wall, "cpu_s": cpu}


def worker(args: argparse.Namespace) -> None:
    import uvloop

    ports = (args.http_port, args.grpc_port)
    result = uvloop.run(_drive(args.worker, args.concurrency, args.seconds, args.data, ports))
    print(json.dumps(result))


def inferd_cell(
    transport: str,
    concurrency: int,
    seconds: float,
    data: Path,
    ports: tuple[int, int],
    src: Path | None = None,
) -> dict[str, Any]:
    """One client in its own process; ``src``, when given, is imported before this checkout."""
    cmd = [sys.executable, __file__, "--worker", transport, "--concurrency", str(concurrency)]
    cmd += ["--seconds", str(seconds), "--data", str(data)]
    cmd += ["--http-port", str(ports[0]), "--grpc-port", str(ports[1])]
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    if run.returncode != 0:
        return {"error": run.stderr.strip().splitlines()[-1][:300]}
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    return {
        "throughput": figures["requests"] / figures["wall_s"],
        "cpu_us_per_request": 1e6 * figures["cpu_s"] / max(1, figures["requests"]),
        "client_cores": figures["cpu_s"] / figures["wall_s"],
    }


# -- the perf_analyzer side -------------------------------------------------------------------


def pa_cell(
    transport: str,
    concurrency: int,
    seconds: float,
    data: Path,
    scratch: Path,
    ports: tuple[int, int],
) -> dict[str, Any]:
    """perf_analyzer at one concurrency: three stable windows (within 50 %) of ``seconds``."""
    protocol, fmt, extra = {**PAIRS, **STREAM_PAIRS}[transport]
    url = f"{HOST}:{ports[0] if protocol == 'http' else ports[1]}"
    csv = scratch / f"pa-{transport}-{concurrency}.csv"
    csv.unlink(missing_ok=True)
    cmd = [str(PERF_ANALYZER), "-m", MODEL, "-u", url, "-i", protocol, "-b", "1"]
    cmd += ["--concurrency-range", str(concurrency), "--input-data", str(data)]
    cmd += ["-p", str(int(seconds * 1000)), "-r", "6", "-s", "50", "-f", str(csv), *extra]
    if fmt:
        cmd += ["--input-tensor-format", fmt, "--output-tensor-format", fmt]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall0 = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - wall0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0 or not csv.exists():
        tail = (run.stdout + run.stderr).strip().splitlines()[-2:]
        return {"error": " / ".join(tail)[:300]}
    header, row = csv.read_text().splitlines()[:2]
    throughput = float(
        dict(zip(header.split(","), row.split(","), strict=False))["Inferences/Second"]
    )
    cores = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / wall
    return {
        "throughput": throughput,
        "cpu_us_per_request": 1e6 * cores / throughput,
        "client_cores": cores,
    }


# -- the run ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per cell")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--transports", help="only these transports, comma separated (e.g. grpc,grpc-stream)"
    )
    parser.add_argument(
        "--grpc-aio", action="store_true", help="also grpcio's asyncio client on unary gRPC"
    )
    parser.add_argument(
        "--old-src",
        type=Path,
        help="also inferd's gRPC clients from this src folder (another checkout), as inferd-old",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--http-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--grpc-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    wanted = set(args.transports.split(",")) if args.transports else None
    if wanted is not None and not wanted <= {*PAIRS, *STREAM_PAIRS}:
        parser.error(f"--transports: choose among {', '.join([*PAIRS, *STREAM_PAIRS])}")
    if args.old_src is not None and not (args.old_src / "inferd").is_dir():
        parser.error(f"--old-src: {args.old_src} holds no inferd package")
    bench_models.build([MODEL])
    with_pa = "perf_analyzer" not in missing_generators()
    if not with_pa:
        print(f"perf_analyzer not found ({PERF_ANALYZER}): inferd's clients only", flush=True)
    with tempfile.TemporaryDirectory(prefix="perf-client-cost-") as tmp:
        scratch = Path(tmp)
        model_dir = scratch / MODEL
        model_dir.mkdir()
        (model_dir / "config.pbtxt").write_text(bench_models.config_text(MODEL, batching=False))
        data = scratch / "data.json"
        data.write_text(json.dumps({"data": [{"input": [0.25] * 64}]}))
        canned = [sys.executable, str(BENCH / "servers" / "canned.py"), str(model_dir)]
        canned += ["--host", HOST, "--http-port", str(CANNED_PORTS[0])]
        canned += ["--grpc-port", str(CANNED_PORTS[1])]
        serve = [sys.executable, "-m", "inferd.cli.main", "serve", "--model-repository"]
        serve += [str(bench_models.repo_dir(MODEL, "off")), "--http-address", HOST]
        serve += ["--http-port", str(INFERD_PORTS[0]), "--grpc-address", HOST]
        serve += ["--grpc-port", str(INFERD_PORTS[1]), "--metrics-port", "0"]
        rows: list[dict[str, Any]] = []
        for name, cmd, ports, pairs in (
            ("canned", canned, CANNED_PORTS, PAIRS),
            ("inferd", serve, INFERD_PORTS, STREAM_PAIRS),
        ):
            ready = f"http://{HOST}:{ports[0]}/v2/health/ready"
            with process(cmd, ready, scratch / f"{name}.log") as server:
                groups = frozenset({os.getpgid(server.pid)})
                for concurrency in CONCURRENCY:
                    for transport in pairs:
                        if wanted is not None and transport not in wanted:
                            continue
                        for client in _clients(transport, args, with_pa):
                            with cpu_share.watch(groups) as share:
                                if client == "inferd":
                                    cell = inferd_cell(
                                        transport, concurrency, args.seconds, data, ports
                                    )
                                elif client == "inferd-old":
                                    cell = inferd_cell(
                                        transport,
                                        concurrency,
                                        args.seconds,
                                        data,
                                        ports,
                                        args.old_src.resolve(),
                                    )
                                elif client == "grpc.aio":
                                    cell = inferd_cell(
                                        "grpc-aio", concurrency, args.seconds, data, ports
                                    )
                                else:
                                    cell = pa_cell(
                                        transport, concurrency, args.seconds, data, scratch, ports
                                    )
                            cell |= {
                                "server": name,
                                "client": client,
                                "transport": transport,
                                "concurrency": concurrency,
                                "others_cores": share.others_cores,
                            }
                            rows.append(cell)
                            print(_line(cell), flush=True)
    _summary(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


def _clients(transport: str, args: argparse.Namespace, with_pa: bool) -> list[str]:
    clients = ["inferd"]
    if args.old_src is not None and transport.startswith("grpc"):
        clients.append("inferd-old")
    if args.grpc_aio and transport == "grpc":
        clients.append("grpc.aio")
    return [*clients, "perf_analyzer"] if with_pa else clients


def _line(cell: dict[str, Any]) -> str:
    head = f"{cell['server']:>6} {cell['client']:>13} {cell['transport']:<11} "
    head += f"c={cell['concurrency']:<2}"
    if "error" in cell:
        return f"{head} error: {cell['error']}"
    others = cell["others_cores"]
    return (
        f"{head} {cell['throughput']:>9.0f} req/s  {cell['cpu_us_per_request']:>6.1f} us CPU/req"
        f"  client {cell['client_cores']:.2f} cores  others {others or 0:.2f} cores"
    )


def _summary(rows: list[dict[str, Any]]) -> None:
    by = {(r["client"], r["transport"], r["concurrency"]): r for r in rows if "error" not in r}
    print("\ninferd / perf_analyzer (throughput ratio, CPU-per-request ratio):")
    for (client, transport, concurrency), mine in by.items():
        if client != "inferd":
            continue
        theirs = by.get(("perf_analyzer", transport, concurrency))
        if theirs is None:
            continue
        print(
            f"  {transport:<11} c={concurrency:<2} "
            f"throughput x{mine['throughput'] / theirs['throughput']:.2f}  "
            f"CPU/request x{mine['cpu_us_per_request'] / theirs['cpu_us_per_request']:.2f}"
        )
    others = [c for c in ("inferd-old", "grpc.aio") if any(k[0] == c for k in by)]
    if others:
        print(f"\ninferd / {' and / '.join(others)} (throughput ratio, CPU-per-request ratio):")
    for (client, transport, concurrency), mine in by.items():
        if client != "inferd":
            continue
        for other in others:
            theirs = by.get((other, transport, concurrency))
            if theirs is None:
                continue
            print(
                f"  {transport:<11} c={concurrency:<2} vs {other:<10} "
                f"throughput x{mine['throughput'] / theirs['throughput']:.2f}  "
                f"CPU/request x{mine['cpu_us_per_request'] / theirs['cpu_us_per_request']:.2f}"
            )


if __name__ == "__main__":
    main()
