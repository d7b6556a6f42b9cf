"""The load generator's server-sent events reader: events split from timestamped pieces, each
stamped with the piece that completed it."""

from __future__ import annotations

from inferd.tools.perf.sse import Event, events


def test_each_event_gets_the_time_of_the_piece_that_ended_it() -> None:
    pieces = [
        (1, b'data: {"a": 1}\n\n'),
        (2, b'data: {"b"'),  # split mid-event: ends in the next piece
        (3, b": 2}\n\ndata: [DONE]\n\n"),
    ]
    assert events(pieces) == [
        Event(1, b'{"a": 1}'),
        Event(3, b'{"b": 2}'),
        Event(3, b"[DONE]"),
    ]


def test_several_events_in_one_piece_share_its_time() -> None:
    assert events([(5, b"data: x\n\ndata: y\n\n")]) == [Event(5, b"x"), Event(5, b"y")]


def test_crlf_and_cr_line_ends_even_split_between_pieces() -> None:
    # a "\r" at the end of a piece waits for the next: it may start a "\r\n"
    pieces = [(1, b"data: a\r"), (2, b"\n\r"), (3, b"\ndata: b\r\r\n")]
    assert events(pieces) == [Event(3, b"a"), Event(3, b"b")]
    assert events([(1, b"data: a\r"), (2, b"\n\r\n")]) == [Event(2, b"a")]


def test_multiline_data_comments_and_other_fields() -> None:
    text = b": keep-alive\n\nevent: message\nid: 7\ndata: one\ndata:two\nretry: 10\n\n"
    assert events([(9, text)]) == [Event(9, b"one\ntwo")]


def test_an_unfinished_event_is_dropped() -> None:
    assert events([(1, b"data: a\n\ndata: cut off")]) == [Event(1, b"a")]
    assert events([(1, b"data: no blank line\n")]) == []


def test_blank_lines_without_data_dispatch_nothing() -> None:
    assert events([(1, b"\n\n\n"), (2, b"data: x\n\n")]) == [Event(2, b"x")]
