"""The order and bounds of one ``ModelStreamInfer`` stream (``serve_stream``), with requests
whose answers the tests release by hand: decoupled responses are written as they come,
ordinary ones in request order among themselves, and a stream that is not read stops taking
work."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.core.streaming import ResponseBudget
from inferd.frontends.grpc.streaming import StreamResult, serve_stream, split_response_room


@dataclass
class Request:
    """A request of the fake stream: ``parts`` are its responses; each waits for its gate."""

    name: str
    parts: list[str]
    ordered: bool = False  # an ordinary model's request
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    produced: int = 0
    closed: bool = False

    def gate(self, part: str) -> asyncio.Event:
        return self.gates.setdefault(part, asyncio.Event())


class Answers:
    def __init__(self) -> None:
        self.answered: list[str] = []
        self.budgets: list[ResponseBudget] = []

    def __call__(
        self, msg: Request, budget: ResponseBudget
    ) -> tuple[bool, AsyncGenerator[StreamResult, None]]:
        self.answered.append(msg.name)
        self.budgets.append(budget)
        return msg.ordered, self._responses(msg)

    @staticmethod
    async def _responses(msg: Request) -> AsyncGenerator[StreamResult, None]:
        try:
            for part in msg.parts:
                if part in msg.gates:
                    await msg.gates[part].wait()
                msg.produced += 1
                yield part, None
        finally:
            msg.closed = True


async def feed(requests: list[Request], hold: asyncio.Event | None = None) -> AsyncIterator[Any]:
    for request in requests:
        yield request
    if hold is not None:
        await hold.wait()  # the client keeps its side of the stream open


def stream(
    requests: list[Request],
    answers: Answers,
    *,
    hold: asyncio.Event | None = None,
    max_inflight: int = 16,
    max_responses: int = 64,
) -> AsyncGenerator[StreamResult, None]:
    return serve_stream(
        feed(requests, hold),
        answers,
        max_inflight=max_inflight,
        max_responses=max_responses,
    )


async def until(condition: Any) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


async def test_a_later_request_is_answered_before_an_earlier_slow_one() -> None:
    slow = Request("slow", ["slow-0", "slow-1"])
    fast = Request("fast", ["fast-0", "fast-1"])
    slow.gate("slow-0")
    written: list[str] = []
    async with contextlib.aclosing(stream([slow, fast], Answers())) as results:
        async for response, failure in results:
            assert failure is None
            written.append(response)
            if response == "fast-1":
                slow.gates["slow-0"].set()
    assert written == ["fast-0", "fast-1", "slow-0", "slow-1"]


async def test_ordinary_answers_keep_request_order_but_do_not_wait_for_decoupled_ones() -> None:
    first = Request("first", ["first"], ordered=True)
    second = Request("second", ["second"], ordered=True)
    open_ended = Request("decoupled", ["d-0", "d-1"])
    first.gate("first")
    open_ended.gate("d-1")
    written: list[str] = []
    async with contextlib.aclosing(stream([open_ended, first, second], Answers())) as results:
        async for response, _ in results:
            written.append(response)
            if response == "d-0":
                await until(lambda: second.produced == 1)  # computed, not yet written
                first.gates["first"].set()
            if response == "second":
                open_ended.gates["d-1"].set()
    assert written == ["d-0", "first", "second", "d-1"]


async def test_the_stream_reads_no_more_than_max_inflight_unanswered_requests() -> None:
    held = [Request(f"r{i}", ["x"]) for i in range(4)]
    for request in held:
        request.gate("x")
    answers = Answers()
    results = stream(held, answers, max_inflight=2)
    first = asyncio.ensure_future(results.__anext__())
    await until(lambda: len(answers.answered) == 2)
    await asyncio.sleep(0.05)
    assert answers.answered == ["r0", "r1"]
    held[1].gates["x"].set()  # one answered: room for one more
    assert (await first)[0] == "x"
    await until(lambda: len(answers.answered) == 3)
    for request in held:
        request.gates["x"].set()
    rest = [response async for response, _ in results]
    assert len(rest) == 3
    assert answers.answered == ["r0", "r1", "r2", "r3"]


async def test_a_stream_that_is_not_read_stops_taking_responses() -> None:
    written_room, _ = split_response_room(8)
    many = Request("many", [f"m{i}" for i in range(100)])
    results = stream([many], Answers(), max_responses=8)
    async with contextlib.aclosing(results):
        assert (await results.__anext__())[0] == "m0"
        await until(lambda: many.produced > 1)
        await asyncio.sleep(0.05)
        # the queue of encoded responses is full, and one more waits in hand
        assert many.produced == 1 + written_room + 1
        rest = [response async for response, _ in results]
    assert len(rest) == 99


async def test_closing_the_stream_cancels_its_running_requests() -> None:
    running = Request("running", ["a", "b"])
    running.gate("b")
    hold = asyncio.Event()
    answers = Answers()
    results = stream([running], answers, hold=hold)
    assert (await results.__anext__())[0] == "a"
    await results.aclose()  # the client went away
    assert running.closed
    budget = answers.budgets[0]
    assert not budget.acquire(lambda: False)  # closed: a model waiting for room gives up


async def test_a_failing_request_stream_ends_after_the_answers_of_what_it_sent() -> None:
    one = Request("one", ["one"])
    one.gate("one")

    async def broken() -> AsyncIterator[Any]:
        yield one
        one.gates["one"].set()
        raise ConnectionError("the client's stream broke")

    results = serve_stream(broken(), Answers(), max_inflight=4, max_responses=8)
    assert (await results.__anext__())[0] == "one"
    with pytest.raises(ConnectionError, match="broke"):
        await results.__anext__()


def test_the_response_room_is_split_between_written_and_sent_ahead() -> None:
    assert split_response_room(1024) == (256, 768)
    assert split_response_room(2) == (1, 1)
    with pytest.raises(ValueError, match="max_responses"):
        split_response_room(1)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.one_of(st.just(0), st.integers(1, 3)), min_size=1, max_size=6),
    st.randoms(use_true_random=False),
    st.integers(2, 6),
)
def test_any_completion_order_loses_nothing_and_keeps_the_ordering_rules(
    shape: list[int], rng: random.Random, max_responses: int
) -> None:
    """``shape``: per request, 0 for an ordinary one (one response), else how many responses a
    decoupled one sends; every response waits for its gate, released in a random order."""
    requests = [
        Request(f"r{i}", [f"r{i}-{j}" for j in range(n or 1)], ordered=n == 0)
        for i, n in enumerate(shape)
    ]
    parts = [part for request in requests for part in request.parts]
    for request in requests:
        for part in request.parts:
            request.gate(part)
    gates = {part: request.gates[part] for request in requests for part in request.parts}
    order = list(parts)
    rng.shuffle(order)

    async def run() -> list[str]:
        written: list[str] = []
        results = stream(requests, Answers(), max_inflight=3, max_responses=max_responses)

        async def read() -> None:
            async for response, _ in results:
                written.append(response)

        reader = asyncio.ensure_future(read())
        for part in order:
            gates[part].set()
            for _ in range(5):
                await asyncio.sleep(0)
        await asyncio.wait_for(reader, 10)
        return written

    written = asyncio.run(run())
    assert sorted(written) == sorted(parts)  # nothing lost or repeated
    for request in requests:  # each request's responses in the order it sent them
        assert [w for w in written if w.startswith(f"{request.name}-")] == request.parts
    ordinary = [r.parts[0] for r in requests if r.ordered]
    assert [w for w in written if w in ordinary] == ordinary  # in request order
