"""HTTP body compression (PROTOCOL.md §2.3): bounded request decompression, response coding choice.

``deflate`` means a zlib stream (RFC 1950), which is what tritonclient and Triton produce.
"""

from __future__ import annotations

import zlib

from inferd.errors import InvalidArgumentError
from inferd.frontends.http.errors import HttpStatusError

RESPONSE_CODINGS = ("gzip", "deflate", "identity")
# Level 1: replies are compressed on the event loop for every aio client (aiohttp always asks
# for gzip), so speed matters more than the last few percent of size.
COMPRESS_LEVEL = 1
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def too_large(limit: int) -> HttpStatusError:
    return HttpStatusError(
        413,
        f"request body is larger than the server's limit of {limit} bytes (--http-max-input-size)",
    )


def decompress_request(
    body: bytes, content_encoding: str, limit: int, too_big: HttpStatusError | None = None
) -> bytes:
    """Undo ``Content-Encoding``; a result above ``limit`` bytes is refused with ``too_big``
    (default: the whole-body 413 of :func:`too_large`). zlib releases the GIL while it works,
    so the caller may run this on a worker thread."""
    coding = content_encoding.strip().lower()
    if coding in ("", "identity"):
        return body
    wbits = _WBITS.get(coding)
    if wbits is None:
        raise InvalidArgumentError(
            f"unsupported Content-Encoding '{content_encoding}': expected gzip, deflate or identity"
        )
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidArgumentError(
            f"failed to decompress the {coding} request body: {exc}"
        ) from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise too_big if too_big is not None else too_large(limit)
    if not inflater.eof:
        raise InvalidArgumentError(f"the {coding} request body is truncated")
    if inflater.unused_data:
        raise InvalidArgumentError(f"unexpected data after the end of the {coding} request body")
    return out


def choose_response_coding(accept_encoding: str | None) -> str:
    """The highest-weighted of gzip/deflate/identity in ``Accept-Encoding``; ties keep the first
    listed; ``identity`` when nothing acceptable is offered."""
    if not accept_encoding:
        return "identity"
    best, best_q = "identity", 0.0
    for item in accept_encoding.split(","):
        token, _, params = item.partition(";")
        coding = token.strip().lower()
        if coding not in RESPONSE_CODINGS:
            continue
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
        if q > best_q:
            best, best_q = coding, q
    return best


def compress_response(body: bytes, coding: str) -> bytes:
    if coding == "identity":
        return body
    deflater = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, _WBITS[coding])
    return deflater.compress(body) + deflater.flush()


__all__ = [
    "COMPRESS_LEVEL",
    "RESPONSE_CODINGS",
    "choose_response_coding",
    "compress_response",
    "decompress_request",
    "too_large",
]
