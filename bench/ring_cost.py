"""Round-trip cost of one descriptor between two processes: ring + eventfd doorbell vs a pipe.

A parent process sends fixed-size descriptors to a spawned echo process, which sends each one
back; we time the round trips. Two loads:

* unloaded — one descriptor in flight: every hop finds the ring empty, so every hop rings a
  doorbell and wakes a sleeping process (the latency floor of a quiet server);
* loaded — ``--window`` descriptors in flight: rings stay non-empty, doorbells are rarely
  written (the throughput of a busy server); reported as time per descriptor.

Transports, measured in the same run:

* ``ring-sync``: :class:`inferd.server.frontends.Ring` + :class:`Doorbell`, blocking ``poll``;
* ``ring-async``: :class:`inferd.server.frontends.Channel` on a uvloop loop at both ends (what
  the front ends and the engine use);
* ``pipe``: ``multiprocessing.Pipe`` (a Unix socketpair with length-prefixed messages),
  blocking ``send_bytes``/``recv_bytes`` — the baseline for ``ring-sync``;
* ``socket-async``: a socketpair with length-prefixed frames through asyncio streams on uvloop
  at both ends — the baseline for ``ring-async``.

Usage: ``python bench/ring_cost.py [--count N] [--window W] [--bytes B] [--repeat R]
[--transports ring-sync,ring-async]``. Prints µs per descriptor round trip (the median of the
repeats, with their range) and, for the rings, doorbell writes per descriptor. Figures are ratios
of one run on one machine; on a machine with fewer free cores than the two processes need,
the unloaded figures include scheduler wake-up latency.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import struct
import time
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

import uvloop

from inferd.server.frontends import ChannelSpec, Doorbell, Put, Ring, create_channel

SPAWN = multiprocessing.get_context("spawn")
STOP = b"\xff" * 8
SEQ = struct.Struct("<Q")


# -- ring + doorbell, blocking ---------------------------------------------------------------


def _put(ring: Ring, bell: Doorbell, payload: bytes) -> None:
    while (put := ring.offer(payload)) is Put.FULL:
        pass
    if put is Put.WAKE:
        bell.ring()


def _get(ring: Ring, bell: Doorbell) -> bytes:
    while (data := ring.try_get()) is None:
        if ring.prepare_to_sleep():  # else a descriptor arrived meanwhile
            bell.wait()
            bell.drain()
        ring.awake()
    return data


def _ring_echo(inbox: str, outbox: str, wake: Doorbell, peer: Doorbell) -> None:
    incoming, outgoing = Ring.attach(inbox), Ring.attach(outbox)
    while (data := _get(incoming, wake)) != STOP:
        _put(outgoing, peer, data)
    incoming.close()
    outgoing.close()


def ring_sync(count: int, window: int, size: int) -> tuple[float, float]:
    to_child, to_parent = Ring.create(None, 256, size), Ring.create(None, 256, size)
    child_bell, parent_bell = Doorbell(), Doorbell()
    proc = SPAWN.Process(
        target=_ring_echo, args=(to_child.name, to_parent.name, child_bell, parent_bell)
    )
    proc.start()
    payload = bytes(size)
    try:
        _put(to_child, child_bell, payload)  # warm up: the child is running
        _get(to_parent, parent_bell)
        rung_before = child_bell.rung
        start = time.perf_counter()
        in_flight = 0
        sent = 0
        for _ in range(count):
            while in_flight < window and sent < count:
                _put(to_child, child_bell, payload)
                sent += 1
                in_flight += 1
            _get(to_parent, parent_bell)
            in_flight -= 1
        elapsed = time.perf_counter() - start
        rings = (child_bell.rung - rung_before) / count
        _put(to_child, child_bell, STOP)
        proc.join()
    finally:
        for ring in (to_child, to_parent):
            ring.close()
            ring.unlink()
        child_bell.close()
        parent_bell.close()
    return elapsed / count * 1e6, rings


# -- channel on uvloop ------------------------------------------------------------------------


def _channel_echo(spec: ChannelSpec) -> None:
    async def main() -> None:
        channel = spec.open()
        spec.close()
        while (data := await channel.receive()) != STOP:
            await channel.send(data)
        channel.close()

    uvloop.run(main())


def ring_async(count: int, window: int, size: int) -> tuple[float, float]:
    engine, spec = create_channel(256, size)
    proc = SPAWN.Process(target=_channel_echo, args=(spec,))
    proc.start()
    payload = bytes(size)

    async def main() -> tuple[float, float]:
        await engine.send(payload)
        await engine.receive()
        rung_before = engine.peer.rung
        start = time.perf_counter()
        pending: deque[asyncio.Future[None]] = deque()
        loop = asyncio.get_running_loop()

        async def reader() -> None:
            for _ in range(count):
                await engine.receive()
                pending.popleft().set_result(None)

        async def client(n: int) -> None:
            for _ in range(n):
                fut: asyncio.Future[None] = loop.create_future()
                pending.append(fut)
                await engine.send(payload)
                await fut

        task = asyncio.create_task(reader())
        per, extra = divmod(count, window)
        await asyncio.gather(*(client(per + (i < extra)) for i in range(window)))
        await task
        elapsed = time.perf_counter() - start
        rings = (engine.peer.rung - rung_before) / count
        await engine.send(STOP)
        return elapsed / count * 1e6, rings

    try:
        return uvloop.run(main())
    finally:
        proc.join()
        engine.close()


# -- multiprocessing.Pipe (socketpair) ---------------------------------------------------------


def _pipe_echo(conn: Connection) -> None:
    while (data := conn.recv_bytes()) != STOP:
        conn.send_bytes(data)


def pipe(count: int, window: int, size: int) -> tuple[float, float]:
    parent, child = SPAWN.Pipe()
    proc = SPAWN.Process(target=_pipe_echo, args=(child,))
    proc.start()
    payload = bytes(size)
    parent.send_bytes(payload)
    parent.recv_bytes()
    start = time.perf_counter()
    in_flight = sent = 0
    for _ in range(count):
        while in_flight < window and sent < count:
            parent.send_bytes(payload)
            sent += 1
            in_flight += 1
        parent.recv_bytes()
        in_flight -= 1
    elapsed = time.perf_counter() - start
    parent.send_bytes(STOP)
    proc.join()
    return elapsed / count * 1e6, float("nan")


# -- a socketpair with asyncio streams on uvloop ------------------------------------------------


LENGTH = struct.Struct("<I")


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
    return await reader.readexactly(size)


def _stream_echo(sock: socket.socket) -> None:
    async def main() -> None:
        reader, writer = await asyncio.open_connection(sock=sock)
        while (data := await _read_frame(reader)) != STOP:
            writer.write(LENGTH.pack(len(data)) + data)
        writer.close()

    uvloop.run(main())


def socket_async(count: int, window: int, size: int) -> tuple[float, float]:
    mine, theirs = socket.socketpair()
    proc = SPAWN.Process(target=_stream_echo, args=(theirs,))
    proc.start()
    theirs.close()
    frame = LENGTH.pack(size) + bytes(size)

    async def main() -> float:
        reader, writer = await asyncio.open_connection(sock=mine)
        writer.write(frame)
        await _read_frame(reader)
        start = time.perf_counter()
        pending: deque[asyncio.Future[None]] = deque()
        loop = asyncio.get_running_loop()

        async def read_all() -> None:
            for _ in range(count):
                await _read_frame(reader)
                pending.popleft().set_result(None)

        async def client(n: int) -> None:
            for _ in range(n):
                fut: asyncio.Future[None] = loop.create_future()
                pending.append(fut)
                writer.write(frame)
                await fut

        task = asyncio.create_task(read_all())
        per, extra = divmod(count, window)
        await asyncio.gather(*(client(per + (i < extra)) for i in range(window)))
        await task
        elapsed = time.perf_counter() - start
        writer.write(LENGTH.pack(len(STOP)) + STOP)
        await writer.drain()
        writer.close()
        return elapsed / count * 1e6

    try:
        return uvloop.run(main()), float("nan")
    finally:
        proc.join()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20000, help="round trips per measurement")
    parser.add_argument("--window", type=int, default=32, help="descriptors in flight, loaded")
    parser.add_argument("--bytes", type=int, default=128, help="descriptor size")
    parser.add_argument("--repeat", type=int, default=3, help="measurements per cell (median)")
    parser.add_argument(
        "--transports",
        default="ring-sync,pipe,ring-async,socket-async",
        help="comma-separated: which transports to measure",
    )
    args = parser.parse_args(argv)
    every: dict[str, Any] = {
        "ring-sync": ring_sync,
        "pipe": pipe,
        "ring-async": ring_async,
        "socket-async": socket_async,
    }
    transports = {name: every[name] for name in args.transports.split(",")}
    print(f"{args.bytes}-byte descriptors, {args.count} round trips, median of {args.repeat}")
    print(f"{'transport':<14}{'load':<16}{'µs/round trip':>15}{'range':>16}{'doorbells/desc':>16}")
    results: dict[tuple[str, int], float] = {}
    for window in (1, args.window):
        load = "unloaded" if window == 1 else f"loaded (w={window})"
        for name, measure in transports.items():
            runs = sorted(measure(args.count, window, args.bytes) for _ in range(args.repeat))
            cost, rings = runs[len(runs) // 2]
            results[(name, window)] = cost
            spread = f"{runs[0][0]:.2f}-{runs[-1][0]:.2f}"
            bells = "" if rings != rings else f"{rings:.3f}"
            print(f"{name:<14}{load:<16}{cost:>15.2f}{spread:>16}{bells:>16}")
    for window in (1, args.window):
        load = "unloaded" if window == 1 else "loaded"
        for ring, base in (("ring-sync", "pipe"), ("ring-async", "socket-async")):
            if (ring, window) in results and (base, window) in results:
                ratio = results[(base, window)] / results[(ring, window)]
                print(f"{ring} vs {base}, {load}: {ratio:.2f}x as fast")


if __name__ == "__main__":
    main()
