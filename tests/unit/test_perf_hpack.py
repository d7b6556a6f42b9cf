"""The load generator's HTTP/2 pieces: HPACK decoding (RFC 7541's own examples), Huffman codes,
frames and gRPC trailers."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.tools.perf.grpc_h2 import frame, grpc_message, request_headers, trailer_error
from inferd.tools.perf.hpack_decode import (
    HUFFMAN_LENGTHS,
    HeaderDecoder,
    HpackError,
    huffman_codes,
    huffman_decode,
    huffman_encode,
    integer,
)


def test_huffman_code_is_rfc_7541s() -> None:
    assert sum(Fraction(1, 2**n) for n in HUFFMAN_LENGTHS) == 1  # a complete prefix code
    codes = huffman_codes()
    # a sample of RFC 7541 Appendix B's "code as hex" column
    expected = {0: 0x1FF8, 1: 0x7FFFD8, 10: 0x3FFFFFFC, 32: 0x14, 48: 0x0, 88: 0xFC}
    expected |= {92: 0x7FFF0, 127: 0xFFFFFFC, 195: 0x7FFF1, 255: 0x3FFFFEE, 256: 0x3FFFFFFF}
    assert {s: codes[s] for s in expected} == expected


def test_rfc_examples_decode() -> None:
    # RFC 7541 C.3.1 (literals) and C.4.1 (the same request, Huffman coded)
    plain = bytes.fromhex("828684410f7777772e6578616d706c652e636f6d")
    coded = bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff")
    want = [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b":authority", b"www.example.com"),
    ]
    for block in (plain, coded):
        decoder = HeaderDecoder()
        assert decoder.decode(block) == want
        # the authority went into the dynamic table: index 62 now names it
        assert decoder.decode(b"\xbe") == [(b":authority", b"www.example.com")]
    assert huffman_encode(b"www.example.com") == bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff")


def test_table_size_updates_evict() -> None:
    decoder = HeaderDecoder()
    decoder.decode(bytes.fromhex("828684410f7777772e6578616d706c652e636f6d"))
    decoder.decode(b"\x20")  # size update to 0: the table empties
    with pytest.raises(HpackError, match="not in the table"):
        decoder.decode(b"\xbe")
    with pytest.raises(HpackError, match="above"):
        decoder.decode(integer(8192, 5, 0x20))


def test_integers_as_in_rfc_c1() -> None:
    assert integer(10, 5) == b"\x0a"
    assert integer(1337, 5) == bytes.fromhex("1f9a0a")
    assert HeaderDecoder()._integer(bytes.fromhex("1f9a0a"), 0, 5) == (1337, 3)


@given(st.binary(max_size=64))
def test_huffman_round_trip(data: bytes) -> None:
    assert huffman_decode(huffman_encode(data)) == data


def test_bad_huffman_padding() -> None:
    with pytest.raises(HpackError, match="padding"):
        huffman_decode(b"\x00")  # '0' then 3 zero bits of padding


def test_frames_and_messages() -> None:
    assert frame(4, 1, 0) == bytes.fromhex("000000040100000000")
    assert frame(0, 1, 3, b"ab") == bytes.fromhex("00000200010000000361") + b"b"
    assert grpc_message(b"xyz") == b"\x00\x00\x00\x00\x03xyz"
    fields = HeaderDecoder().decode(request_headers("h:1", "/svc/M"))
    assert fields[:4] == [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/svc/M"),
        (b":authority", b"h:1"),
    ]
    assert (b"te", b"trailers") in fields


def test_trailers() -> None:
    assert trailer_error({b"grpc-status": b"0"}) is None
    assert trailer_error({b"grpc-status": b"3", b"grpc-message": b"bad%20shape"}) == "bad shape"
    assert trailer_error({b"grpc-status": b"13"}) == "gRPC status INTERNAL"
    assert "HTTP status 503" in str(trailer_error({b":status": b"503"}))
