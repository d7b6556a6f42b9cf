"""HPACK (RFC 7541) header decoding, for reading gRPC's response headers and trailers.

A complete decoder (static and dynamic tables, integers, Huffman strings), written for the load
generator's HTTP/2 client: every header block a server sends is decoded in order, so the dynamic
table stays in step with the server's encoder. Requests need no encoder: their few headers are
written once as literals without indexing (:func:`literal`).
"""

from __future__ import annotations

from inferd.errors import HpackError as HpackError

# RFC 7541 Appendix A
STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = tuple(
    (name.encode(), value.encode())
    for name, value in (
        (":authority", ""),
        (":method", "GET"),
        (":method", "POST"),
        (":path", "/"),
        (":path", "/index.html"),
        (":scheme", "http"),
        (":scheme", "https"),
        (":status", "200"),
        (":status", "204"),
        (":status", "206"),
        (":status", "304"),
        (":status", "400"),
        (":status", "404"),
        (":status", "500"),
        ("accept-charset", ""),
        ("accept-encoding", "gzip, deflate"),
        ("accept-language", ""),
        ("accept-ranges", ""),
        ("accept", ""),
        ("access-control-allow-origin", ""),
        ("age", ""),
        ("allow", ""),
        ("authorization", ""),
        ("cache-control", ""),
        ("content-disposition", ""),
        ("content-encoding", ""),
        ("content-language", ""),
        ("content-length", ""),
        ("content-location", ""),
        ("content-range", ""),
        ("content-type", ""),
        ("cookie", ""),
        ("date", ""),
        ("etag", ""),
        ("expect", ""),
        ("expires", ""),
        ("from", ""),
        ("host", ""),
        ("if-match", ""),
        ("if-modified-since", ""),
        ("if-none-match", ""),
        ("if-range", ""),
        ("if-unmodified-since", ""),
        ("last-modified", ""),
        ("link", ""),
        ("location", ""),
        ("max-forwards", ""),
        ("proxy-authenticate", ""),
        ("proxy-authorization", ""),
        ("range", ""),
        ("referer", ""),
        ("refresh", ""),
        ("retry-after", ""),
        ("server", ""),
        ("set-cookie", ""),
        ("strict-transport-security", ""),
        ("transfer-encoding", ""),
        ("user-agent", ""),
        ("vary", ""),
        ("via", ""),
        ("www-authenticate", ""),
    )
)

# The bit length of each symbol's Huffman code (RFC 7541 Appendix B; symbol 256 is EOS). The
# code is canonical (shorter codes first, equal lengths in symbol order), so the lengths alone
# define it.
HUFFMAN_LENGTHS: tuple[int, ...] = (
    *(13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28),
    *(28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28),
    *(6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6),
    *(5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10),
    *(13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7),
    *(7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6),
    *(15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5),
    *(6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28),
    *(20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23),
    *(24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24),
    *(22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23),
    *(21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23),
    *(26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25),
    *(19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27),
    *(20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23),
    *(26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26),
    30,
)
EOS = 256


def huffman_codes() -> list[int]:
    """Each symbol's code, rebuilt from the canonical lengths."""
    codes = [0] * len(HUFFMAN_LENGTHS)
    order = sorted(range(len(HUFFMAN_LENGTHS)), key=lambda s: (HUFFMAN_LENGTHS[s], s))
    code, previous = 0, HUFFMAN_LENGTHS[order[0]]
    for position, symbol in enumerate(order):
        length = HUFFMAN_LENGTHS[symbol]
        if position:
            code = (code + 1) << (length - previous)
        codes[symbol], previous = code, length
    return codes


_DECODE: dict[tuple[int, int], int] = {
    (HUFFMAN_LENGTHS[s], code): s for s, code in enumerate(huffman_codes())
}


def huffman_decode(data: bytes) -> bytes:
    """The octets a Huffman-coded string holds (padding: at most 7 one-bits, RFC 7541 5.2)."""
    out = bytearray()
    code = length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((byte >> shift) & 1)
            length += 1
            symbol = _DECODE.get((length, code))
            if symbol is not None:
                if symbol == EOS:
                    raise HpackError("Huffman string holds the EOS symbol")
                out.append(symbol)
                code = length = 0
            elif length > 30:
                raise HpackError("invalid Huffman code")
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("invalid Huffman padding")
    return bytes(out)


def huffman_encode(data: bytes) -> bytes:
    """Huffman coding of ``data`` (the tests' counterpart of :func:`huffman_decode`)."""
    codes = huffman_codes()
    bits = nbits = 0
    for byte in data:
        bits = (bits << HUFFMAN_LENGTHS[byte]) | codes[byte]
        nbits += HUFFMAN_LENGTHS[byte]
    pad = -nbits % 8
    bits = (bits << pad) | ((1 << pad) - 1)
    return (bits.to_bytes((nbits + pad) // 8, "big")) if nbits else b""


def integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """``value`` in an N-bit prefix (RFC 7541 5.1); ``first`` holds the octet's other bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes) -> bytes:
    """One header as a literal without indexing, new name, no Huffman coding."""
    return b"\x00" + integer(len(name), 7) + name + integer(len(value), 7) + value


class HeaderDecoder:
    """Decodes a connection's header blocks in order (one dynamic table per connection)."""

    def __init__(self, max_table_size: int = 4096) -> None:
        self._limit = max_table_size  # what this side allows (SETTINGS_HEADER_TABLE_SIZE)
        self._max = max_table_size
        self._table: list[tuple[bytes, bytes]] = []  # newest first
        self._size = 0

    def _integer(self, block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
        limit = (1 << prefix_bits) - 1
        value = block[pos] & limit
        pos += 1
        if value < limit:
            return value, pos
        shift = 0
        while True:
            if pos >= len(block) or shift > 28:
                raise HpackError("truncated or oversized integer")
            byte = block[pos]
            pos += 1
            value += (byte & 127) << shift
            shift += 7
            if not byte & 128:
                return value, pos

    def _string(self, block: bytes, pos: int) -> tuple[bytes, int]:
        if pos >= len(block):
            raise HpackError("truncated string")
        huffman = block[pos] & 128
        length, pos = self._integer(block, pos, 7)
        if pos + length > len(block):
            raise HpackError("truncated string")
        raw = block[pos : pos + length]
        return (huffman_decode(raw) if huffman else raw), pos + length

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 1 <= index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        dynamic = index - len(STATIC_TABLE) - 1
        if 0 <= dynamic < len(self._table):
            return self._table[dynamic]
        raise HpackError(f"header index {index} is not in the table")

    def _evict(self) -> None:
        while self._size > self._max and self._table:
            name, value = self._table.pop()
            self._size -= len(name) + len(value) + 32

    def _add(self, name: bytes, value: bytes) -> None:
        self._table.insert(0, (name, value))
        self._size += len(name) + len(value) + 32
        self._evict()

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """The ``(name, value)`` pairs of one complete header block."""
        headers: list[tuple[bytes, bytes]] = []
        pos = 0
        while pos < len(block):
            first = block[pos]
            if first & 0x80:  # indexed field
                index, pos = self._integer(block, pos, 7)
                headers.append(self._entry(index))
                continue
            if first & 0xE0 == 0x20:  # dynamic table size update
                size, pos = self._integer(block, pos, 5)
                if size > self._limit:
                    raise HpackError(f"table size {size} above the {self._limit} allowed")
                self._max = size
                self._evict()
                continue
            indexing = bool(first & 0x40)
            index, pos = self._integer(block, pos, 6 if indexing else 4)
            if index:
                name = self._entry(index)[0]
            else:
                name, pos = self._string(block, pos)
            value, pos = self._string(block, pos)
            if indexing:
                self._add(name, value)
            headers.append((name, value))
        return headers
