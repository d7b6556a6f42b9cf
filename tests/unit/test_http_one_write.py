"""A response's head leaves with its body in one transport write (``frontends/http/cycle.py``).

The transport here records writes: the number of writes is what is under test, and a real
socket would merge them out of sight.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from inferd.frontends.http.cycle import CONTINUE, JOIN_LIMIT, Cycle, Flow

DATE = b"date: Sat, 28 Nov 2026 00:00:00 GMT\r\n"


@dataclass
class _Transport:
    writes: list[bytes] = field(default_factory=list)
    closed: bool = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def _cycle(transport: _Transport, *, method: str = "GET", keep_alive: bool = True) -> Cycle:
    loop = asyncio.get_running_loop()
    scope = {"type": "http", "method": method, "path": "/"}
    return Cycle(
        scope,
        transport,  # type: ignore[arg-type]
        Flow(transport, loop),  # type: ignore[arg-type]
        keep_alive=keep_alive,
        expect_100_continue=True,
        date=lambda: DATE,
        on_response=lambda: None,
    )


def _start(length: int | None) -> dict[str, Any]:
    headers = [] if length is None else [(b"content-length", b"%d" % length)]
    return {"type": "http.response.start", "status": 200, "headers": headers}


HEAD_4 = b"HTTP/1.1 200 OK\r\n" + DATE + b"content-length: 4\r\n\r\n"


async def test_head_and_body_are_one_write() -> None:
    transport = _Transport()
    cycle = _cycle(transport)
    await cycle.send(_start(4))
    assert transport.writes == []
    await cycle.send({"type": "http.response.body", "body": b"body"})
    assert transport.writes == [HEAD_4 + b"body"]
    assert cycle.response_complete


async def test_streamed_parts_after_the_first_go_straight_through() -> None:
    transport = _Transport()
    cycle = _cycle(transport)
    await cycle.send(_start(None))
    await cycle.send({"type": "http.response.body", "body": b"ab", "more_body": True})
    await cycle.send({"type": "http.response.body", "body": b"cde", "more_body": True})
    await cycle.send({"type": "http.response.body", "body": b""})
    head = b"HTTP/1.1 200 OK\r\n" + DATE + b"transfer-encoding: chunked\r\n\r\n"
    assert transport.writes == [head + b"2\r\nab\r\n", b"3\r\ncde\r\n", b"0\r\n\r\n"]


async def test_the_interim_100_continue_is_not_held() -> None:
    transport = _Transport()
    cycle = _cycle(transport)
    cycle.more_body = False
    cycle.event.set()
    await cycle.receive()
    assert transport.writes == [CONTINUE]


async def test_closing_after_the_response_sends_it_first() -> None:
    transport = _Transport()
    cycle = _cycle(transport, keep_alive=False)
    await cycle.send(_start(4))
    await cycle.send({"type": "http.response.body", "body": b"body"})
    head = b"HTTP/1.1 200 OK\r\n" + DATE + b"content-length: 4\r\nconnection: close\r\n\r\n"
    assert transport.writes == [head + b"body"]
    assert transport.closed


async def test_a_large_body_is_not_copied_onto_its_head() -> None:
    transport = _Transport()
    cycle = _cycle(transport)
    body = b"x" * (JOIN_LIMIT + 1)
    await cycle.send(_start(len(body)))
    await cycle.send({"type": "http.response.body", "body": body})
    assert len(transport.writes) == 2
    assert transport.writes[1] == body


async def test_a_head_request_sends_no_body() -> None:
    transport = _Transport()
    cycle = _cycle(transport, method="HEAD")
    await cycle.send(_start(4))
    await cycle.send({"type": "http.response.body", "body": b"body"})
    assert transport.writes == [HEAD_4]
