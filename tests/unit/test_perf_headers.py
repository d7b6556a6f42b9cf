"""``-H NAME:VALUE``: parsed and checked once, encoded into HTTP header lines and gRPC metadata
(the HTTP/2 header block each call sends), every bad header refused in one line."""

from __future__ import annotations

import httptools
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.client.headers import (
    _FRAMING,
    check_grpc,
    grpc_metadata,
    http_lines,
    parse_header,
    parse_headers,
)
from inferd.errors import InvalidArgumentError
from inferd.tools.perf.grpc_h2 import request_headers, trailer_error
from inferd.tools.perf.hpack_decode import HeaderDecoder
from inferd.tools.perf.http_client import HttpTransport, _Prepared
from inferd.tools.perf.metadata import error_text, is_https, split_url

TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~"
names = st.text(TOKEN_CHARS, min_size=1, max_size=20).filter(lambda n: n.lower() not in _FRAMING)
values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


def test_name_and_value_split_at_the_first_colon() -> None:
    assert parse_header("x-api-key:s3cret") == ("x-api-key", "s3cret")
    assert parse_header("Authorization: Bearer a:b") == ("Authorization", "Bearer a:b")
    assert parse_header("X-Empty:") == ("X-Empty", "")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no-colon", "expected NAME:VALUE"),
        (":value", "expected NAME:VALUE"),
        ("bad name:v", "the header name 'bad name' holds ' '"),
        ("x-key:line\r\nInjected: yes", "printable ASCII, without CR, LF"),
        ("x-key:a\nb", "printable ASCII"),
        ("x-key:tab\there", "printable ASCII"),
        ("x-key:caf\u00e9", "printable ASCII"),
        ("Content-Length:3", "sets this header itself"),
        ("host:elsewhere", "sets this header itself"),
        ("Inference-Header-Content-Length:1", "sets this header itself"),
    ],
)
def test_bad_headers_are_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_header(text)


def test_a_name_given_twice_is_refused_whatever_its_case() -> None:
    assert parse_headers(["a:1", "b:2"]) == (("a", "1"), ("b", "2"))
    with pytest.raises(InvalidArgumentError, match="X-Key is given twice"):
        parse_headers(["x-key:1", "X-Key:2"])


def test_grpc_refuses_its_own_names_and_binary_metadata() -> None:
    check_grpc((("x-key", "v"),))
    with pytest.raises(InvalidArgumentError, match="gRPC's own"):
        check_grpc((("grpc-timeout", "1S"),))
    with pytest.raises(InvalidArgumentError, match="binary"):
        check_grpc((("trace-bin", "AA=="),))
    assert grpc_metadata((("X-API-Key", "V"),)) == (("x-api-key", "V"),)


@given(st.lists(st.tuples(names, values), max_size=5, unique_by=lambda h: h[0].lower()))
def test_http_lines_parse_back_as_the_headers_given(headers: list[tuple[str, str]]) -> None:
    parsed = parse_headers(f"{n}:{v}" for n, v in headers)
    assert parsed == tuple((n, v.strip(" ")) for n, v in headers)
    seen: list[tuple[bytes, bytes]] = []

    class Sink:
        def on_header(self, name: bytes, value: bytes) -> None:
            seen.append((name, value))

    parser = httptools.HttpRequestParser(Sink())
    parser.feed_data(b"GET / HTTP/1.1\r\nHost: h\r\n" + http_lines(parsed) + b"\r\n")
    assert seen[1:] == [(n.encode(), v.encode()) for n, v in parsed]


@given(st.lists(st.tuples(names, values), max_size=5, unique_by=lambda h: h[0].lower()))
def test_grpc_header_blocks_decode_to_the_metadata(headers: list[tuple[str, str]]) -> None:
    headers = [(n, v) for n, v in headers if not n.lower().startswith("grpc-")]
    headers = [(n, v) for n, v in headers if not n.lower().endswith("-bin")]
    metadata = grpc_metadata(tuple(headers))
    block = request_headers("h:1", "/svc/M", scheme="https", metadata=metadata)
    fields = HeaderDecoder().decode(block)
    assert fields[1] == (b":scheme", b"https")
    assert fields[6:] == [(n.encode(), v.encode()) for n, v in metadata]


def test_prepared_http_requests_carry_the_headers_once_built() -> None:
    transport = HttpTransport("127.0.0.1:9", "m", headers=(("x-api-key", "s"), ("A", "b")))
    wire = transport.wire(_Prepared({"inputs": []}, b"", b""), None)
    head, _, body = wire.partition(b"\r\n\r\n")
    assert head.endswith(b"\r\nx-api-key: s\r\nA: b")
    assert body == b'{"inputs":[]}'


def test_https_urls_and_refusals_say_what_to_send() -> None:
    assert is_https("https://h:1")
    assert not is_https("http://h:1")
    assert not is_https("h:1")
    assert split_url("https://127.0.0.1:8443", 8000) == ("127.0.0.1", 8443)
    refused = error_text(403, b'{"error": "This API is restricted, expecting header \'k\'"}')
    assert refused.startswith("This API is restricted, expecting header 'k' (")
    assert "-H NAME:VALUE" in refused
    assert "-H" not in error_text(400, b'{"error": "bad input"}')
    assert "-H NAME:VALUE" in str(trailer_error({b"grpc-status": b"7", b"grpc-message": b"no"}))
    assert "-H" not in str(trailer_error({b"grpc-status": b"3", b"grpc-message": b"no"}))
