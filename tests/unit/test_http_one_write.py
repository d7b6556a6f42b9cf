"""A response's head leaves with its body in one transport write."""

from __future__ import annotations

from dataclasses import dataclass, field

from inferd.frontends.http.protocol import _JOIN_LIMIT, _OneWrite

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n"


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

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


@dataclass
class _Cycle:
    response_started: bool = False


def test_head_and_body_are_one_write() -> None:
    transport, cycle = _Transport(), _Cycle()
    out = _OneWrite(transport, cycle)  # type: ignore[arg-type]
    cycle.response_started = True
    out.write(HEAD)
    assert transport.writes == []
    out.write(b"body")
    assert transport.writes == [HEAD + b"body"]
    out.write(b"more")  # later body writes go straight through
    assert transport.writes == [HEAD + b"body", b"more"]


def test_interim_answers_before_the_response_are_not_held() -> None:
    transport, cycle = _Transport(), _Cycle()
    out = _OneWrite(transport, cycle)  # type: ignore[arg-type]
    out.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


def test_closing_sends_a_held_head_first() -> None:
    transport, cycle = _Transport(), _Cycle(response_started=True)
    out = _OneWrite(transport, cycle)  # type: ignore[arg-type]
    out.write(HEAD)
    out.close()
    assert transport.writes == [HEAD]
    assert transport.closed


def test_any_other_use_of_the_transport_sends_a_held_head_first() -> None:
    transport, cycle = _Transport(), _Cycle(response_started=True)
    out = _OneWrite(transport, cycle)  # type: ignore[arg-type]
    out.write(HEAD)
    assert out.get_extra_info("peername") == "info:peername"
    assert transport.writes == [HEAD]


def test_a_large_body_is_not_copied_onto_its_head() -> None:
    transport, cycle = _Transport(), _Cycle(response_started=True)
    out = _OneWrite(transport, cycle)  # type: ignore[arg-type]
    body = b"x" * (_JOIN_LIMIT + 1)
    out.write(HEAD)
    out.write(body)
    assert transport.writes == [HEAD, body]
