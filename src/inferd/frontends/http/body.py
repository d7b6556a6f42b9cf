"""Request bodies of the HTTP front end: size limits, and decoding that keeps the event loop free.

Limits (each refused with 413 naming the limit and its flag):

* Every body, binary tensors included, after decompression: ``--http-max-input-size``.
* JSON, which costs several times its size once parsed (a Python object per number) where a
  binary tensor costs its size: ``--http-max-json-input-size`` bounds an inference body without
  ``Inference-Header-Content-Length`` (all JSON), the JSON header of a binary inference request,
  and the repository index and unload bodies.
* A model load body carries model files as base64 strings, one Python object per file whatever
  its size. It may exceed the JSON limit, up to the whole-body limit, when it holds few JSON
  values: at most ``json_limit // 64`` of the bytes ``,`` ``[`` ``{`` (base64 text has none),
  counted before parsing. Parsing such a body costs about its size plus a bounded number of
  objects.

Memory (peak RSS growth while one JSON inference body is decoded, measured by
``bench/http_json_bodies.py`` and in process): about 4 times the body for FP32 data as clients
write it (~11 characters per number: orjson's parse tree of 16 bytes per value, then a 24-byte
Python float and an 8-byte list slot per number, then the array), plus the body itself; at worst,
for the shortest number text (``0,`` or ``0.0,`` repeated), about 15 times. The JSON limit
(8 MiB by default) therefore bounds one decoding to ~40 MiB for FP32 data and ~130 MiB at worst,
and since large bodies are decoded one at a time (:data:`DECODE_CONCURRENCY`), that is also the
bound across requests; smaller bodies (below :data:`OFF_LOOP_BYTES`) cost at most 16 times
their size each. Nothing is parsed before its size is checked.

Event loop: orjson holds the GIL for a whole parse, so no thread makes a parse itself
concurrent with the loop; what a worker thread does buy is that the loop waits for at most the
one C call in progress (a parse of at most the JSON limit: tens of milliseconds at 8 MiB)
instead of for every queued request's whole decoding, and that zlib (which releases the GIL)
inflates in parallel. Small bodies are decoded inline: a thread hop costs more than they do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from inferd.frontends.http.errors import HttpStatusError

T = TypeVar("T")

JSON_LIMIT_FLAG = "--http-max-json-input-size"
#: bodies (or JSON headers) from this size on are decoded on a worker thread
OFF_LOOP_BYTES = 256 * 1024
#: compressed bodies from this size on are inflated on a worker thread
OFF_LOOP_COMPRESSED_BYTES = 16 * 1024
#: how many large bodies are decoded at once (the machine's cores are shared with the models)
DECODE_CONCURRENCY = 1
#: a load body above the JSON limit may hold at most ``json_limit // this`` of ``,[{``
LOAD_BYTES_PER_VALUE = 64


def json_too_large(limit: int, what: str) -> HttpStatusError:
    """413 for JSON above ``--http-max-json-input-size``; ``what`` names the JSON."""
    return HttpStatusError(
        413,
        f"{what} is larger than the server's limit of {limit} bytes for JSON "
        f"({JSON_LIMIT_FLAG}); send large tensors as binary data (the binary tensor extension: "
        "'binary_data_size' with the Inference-Header-Content-Length header)",
    )


def check_load_body(body: bytes, json_limit: int) -> None:
    """Refuse a model load body above the JSON limit unless its bulk is base64 file contents."""
    if len(body) <= json_limit:
        return
    values = body.count(b",") + body.count(b"[") + body.count(b"{")
    allowed = json_limit // LOAD_BYTES_PER_VALUE
    if values > allowed:
        raise HttpStatusError(
            413,
            f"model load request of {len(body)} bytes is larger than the server's limit of "
            f"{json_limit} bytes for JSON ({JSON_LIMIT_FLAG}); a larger load request is "
            "accepted (up to --http-max-input-size) only when its bulk is base64 'file:' "
            f"contents, with at most {allowed} JSON values, and this one holds about {values}",
        )


class OffLoop:
    """Runs the decoding of large bodies on worker threads, at most ``concurrency`` at a time.

    The bound on concurrent decodings also bounds the memory that parsed JSON holds at any
    moment (``concurrency`` times the per-request peak). Work below ``threshold_bytes`` runs
    inline. Threads come from the running loop's default executor (owned by the loop).
    """

    def __init__(
        self, threshold_bytes: int = OFF_LOOP_BYTES, concurrency: int = DECODE_CONCURRENCY
    ) -> None:
        if concurrency <= 0:
            raise ValueError("concurrency must be positive")
        self._threshold = threshold_bytes
        self._slots = asyncio.Semaphore(concurrency)

    @property
    def threshold_bytes(self) -> int:
        return self._threshold

    async def run(self, size: int, fn: Callable[..., T], /, *args: Any) -> T:
        """``fn(*args)``: inline when ``size`` (the bytes ``fn`` will decode) is small, else on
        a worker thread once a slot is free."""
        if size < self._threshold:
            return fn(*args)
        async with self._slots:
            return await asyncio.to_thread(fn, *args)


__all__ = [
    "DECODE_CONCURRENCY",
    "JSON_LIMIT_FLAG",
    "OFF_LOOP_BYTES",
    "OFF_LOOP_COMPRESSED_BYTES",
    "OffLoop",
    "check_load_body",
    "json_too_large",
]
