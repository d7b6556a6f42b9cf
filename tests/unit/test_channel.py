"""The async channel over two rings and two doorbells, on asyncio and on uvloop, within one
process and between the engine's process and a spawned front end."""

from __future__ import annotations

import asyncio
import multiprocessing
import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvloop

from inferd.server.frontends import (
    Channel,
    ChannelClosedError,
    ChannelSpec,
    DescriptorTooLargeError,
    available,
    create_channel,
)
from inferd.server.frontends.shared import SHM_DIR

pytestmark = pytest.mark.skipif(not available(), reason="needs Linux eventfd and /dev/shm")

SPAWN = multiprocessing.get_context("spawn")
ITEM = struct.Struct("<II")
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Iterator[Callable[[Any], Any]]:
    """Run a coroutine to completion on a fresh loop of the parametrised kind."""
    loop = LOOPS[request.param]()

    def runner(coro: Any) -> Any:
        return loop.run_until_complete(asyncio.wait_for(coro, timeout=60))

    yield runner
    loop.close()


@pytest.fixture
def pair() -> Iterator[tuple[Channel, Channel]]:
    engine, spec = create_channel(slots=4, slot_bytes=64)  # tiny: senders wait for room
    frontend = spec.open()
    yield engine, frontend
    frontend.close()
    engine.close()


def test_many_senders_in_order_through_a_small_ring(
    run: Callable[[Any], Any], pair: tuple[Channel, Channel]
) -> None:
    engine, frontend = pair
    senders, count = 8, 300

    async def send(sender: int) -> None:
        for seq in range(count):
            await frontend.send(ITEM.pack(sender, seq))

    async def main() -> dict[int, list[int]]:
        tasks = [asyncio.create_task(send(i)) for i in range(senders)]
        seen: dict[int, list[int]] = {}
        for _ in range(senders * count):
            sender, seq = ITEM.unpack(await engine.receive())
            seen.setdefault(sender, []).append(seq)
        await asyncio.gather(*tasks)
        return seen

    assert run(main()) == {i: list(range(count)) for i in range(senders)}
    assert engine.receive_nowait() is None
    sent, received = frontend.statistics(), engine.statistics()
    assert (sent.sent, received.received) == (senders * count, senders * count)
    assert sent.waits_for_room > 0  # the 4-slot ring was full and senders slept
    # far fewer doorbell writes than descriptors: only empty → non-empty and room-wanted
    assert sent.doorbells + received.doorbells < senders * count


def test_request_and_reply_both_ways(
    run: Callable[[Any], Any], pair: tuple[Channel, Channel]
) -> None:
    engine, frontend = pair

    async def serve() -> None:
        while True:
            data = await engine.receive()
            await engine.send(data.upper())

    async def main() -> list[bytes]:
        server = asyncio.create_task(serve())
        replies = []
        for word in (b"a", b"bc", b"def") * 50:
            await frontend.send(word)
            replies.append(await frontend.receive())
        server.cancel()
        return replies

    assert run(main()) == [b"A", b"BC", b"DEF"] * 50


def test_one_doorbell_for_what_one_pass_sends_to_a_sleeping_peer(
    run: Callable[[Any], Any],
) -> None:
    """The sends of one pass of the loop wake a sleeping peer once, after the last of them."""
    engine, spec = create_channel(slots=64, slot_bytes=64)
    frontend = spec.open()

    async def main() -> list[bytes]:
        receiver = asyncio.create_task(engine.receive())
        await asyncio.sleep(0)  # the engine found its ring empty and sleeps
        for i in range(20):  # one pass: a batch's replies
            await frontend.send(b"%d" % i)
        assert frontend.statistics().doorbells == 0  # not yet: due at the end of the pass
        got = [await receiver]
        got += [await engine.receive() for _ in range(19)]
        return got

    try:
        assert run(main()) == [b"%d" % i for i in range(20)]
        assert frontend.statistics().doorbells == 1
    finally:
        frontend.close()
        engine.close()


def test_a_busy_receiver_costs_its_sender_no_doorbell(run: Callable[[Any], Any]) -> None:
    """A receiver that is awake (it took everything and has not gone to sleep) is not rung,
    however often its ring runs empty."""
    engine, spec = create_channel(slots=64, slot_bytes=64)
    frontend = spec.open()

    async def main() -> None:
        for i in range(50):
            await frontend.send(b"%d" % i)
            assert await engine.receive() == b"%d" % i  # never waits: it is there

    try:
        run(main())
        assert frontend.statistics().doorbells == 0
    finally:
        frontend.close()
        engine.close()


def test_send_refuses_an_oversized_descriptor(
    run: Callable[[Any], Any], pair: tuple[Channel, Channel]
) -> None:
    _, frontend = pair
    with pytest.raises(DescriptorTooLargeError):
        run(frontend.send(b"x" * 65))


def test_close_wakes_a_waiting_receiver(
    run: Callable[[Any], Any], pair: tuple[Channel, Channel]
) -> None:
    engine, _ = pair

    async def main() -> None:
        waiting = asyncio.create_task(engine.receive())
        await asyncio.sleep(0)
        engine.close()
        with pytest.raises(ChannelClosedError):
            await waiting
        with pytest.raises(ChannelClosedError):
            await engine.receive()

    run(main())


def test_names_unlinked_once_attached_leave_the_channel_working(
    run: Callable[[Any], Any], pair: tuple[Channel, Channel]
) -> None:
    engine, frontend = pair
    names = [engine.incoming.name, engine.outgoing.name]
    engine.unlink()
    assert not [name for name in names if (SHM_DIR / name).exists()]

    async def main() -> bytes:
        await frontend.send(b"still here")
        return await engine.receive()

    assert run(main()) == b"still here"


def _echo_front_end(spec: ChannelSpec, loop_kind: str, count: int) -> None:
    """A front end in its own process: send ``count`` requests, check every reply, exit."""

    async def main() -> None:
        channel = spec.open()
        spec.close()

        async def sender() -> None:
            for seq in range(count):
                await channel.send(ITEM.pack(1, seq))

        task = asyncio.create_task(sender())
        for seq in range(count):
            assert ITEM.unpack(await channel.receive()) == (2, seq)
        await task
        channel.close()

    loop = LOOPS[loop_kind]()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


@pytest.mark.parametrize("child_loop", sorted(LOOPS))
def test_engine_and_a_spawned_front_end(run: Callable[[Any], Any], child_loop: str) -> None:
    engine, spec = create_channel(slots=8, slot_bytes=32)
    count = 3000
    child = SPAWN.Process(target=_echo_front_end, args=(spec, child_loop, count))
    child.start()

    async def serve() -> list[int]:
        seen = []
        for _ in range(count):
            sender, seq = ITEM.unpack(await engine.receive())
            assert sender == 1
            seen.append(seq)
            await engine.send(ITEM.pack(2, seq))
        return seen

    try:
        assert run(serve()) == list(range(count))
        child.join(timeout=60)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
            child.join()
        engine.close()
