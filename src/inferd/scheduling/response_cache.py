"""The response cache: identical requests answered from a bounded LRU, without running the model.

A request's key is a BLAKE2b digest of everything that decides what the model produces: the
model name and version, each input's name, datatype, shape and raw bytes, and the request
parameters a model can read. Parameters that only steer scheduling (``priority``, ``timeout``)
are left out, so they share entries; so are the outputs a request asks for (their selection,
order, ``class_count`` and parameters), as in Triton's cache: an entry holds every raw output
the model produced, and each caller's selection and classification are shaped from it
afterwards (:mod:`inferd.core.shaping`). Input buffers are hashed where they lie: no copy unless
an array is not contiguous.

Entries hold read-only copies of the model's raw outputs: a hit hands those arrays out as they
are, so no caller can change what the next one receives, and nothing the cache holds pins a
runtime's or a worker's memory. The total size of the entries is bounded by the configured
bytes; an entry larger than the whole cache is not stored.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

import numpy as np

from inferd.codecs.model_config import ModelConfig
from inferd.core.inference import InferRequest, ParamValue
from inferd.errors import ConfigError, InvalidArgumentError

__all__ = [
    "CACHE_NAMES",
    "ENTRY_OVERHEAD_BYTES",
    "CacheStats",
    "ResponseCache",
    "check_model_cache",
    "parse_cache_config",
    "request_key",
]

# the cache implementations ``--cache-config`` accepts, with the settings each one takes
CACHE_NAMES: dict[str, tuple[str, ...]] = {"local": ("size",)}
# request parameters that change when a request runs, never what it answers
SCHEDULING_PARAMETERS = frozenset({"priority", "timeout"})
# what an entry costs besides its tensors' bytes (its key, the dict slots, the array headers)
ENTRY_OVERHEAD_BYTES = 256
OUTPUT_OVERHEAD_BYTES = 128

Outputs = dict[str, np.ndarray[Any, Any]]


def parse_cache_config(items: Sequence[str]) -> int | None:
    """The cache size in bytes from ``--cache-config <cache>,<key>=<value>`` values (None: no
    cache). Unknown caches and settings, malformed values and a second cache are refused."""
    if not items:
        return None
    settings: dict[str, dict[str, str]] = {}
    for item in items:
        name, comma, setting = item.partition(",")
        key, equals, value = setting.partition("=")
        if not name or not comma:
            raise InvalidArgumentError(
                "--cache-config needs a cache name: the format is <cache>,<setting>=<value> "
                f"(e.g. local,size=1048576), got '{item}'"
            )
        if not equals or not key or not value:
            raise InvalidArgumentError(
                f"--cache-config format is <cache>,<setting>=<value>, got '{item}'"
            )
        if name not in CACHE_NAMES:
            raise InvalidArgumentError(
                f"--cache-config names an unknown cache '{name}'; this server has: "
                + ", ".join(sorted(CACHE_NAMES))
            )
        if key not in CACHE_NAMES[name]:
            raise InvalidArgumentError(
                f"--cache-config: the '{name}' cache has no setting '{key}'; its settings: "
                + ", ".join(CACHE_NAMES[name])
            )
        settings.setdefault(name, {})[key] = value
    if len(settings) > 1:
        raise InvalidArgumentError(
            "--cache-config names several caches ("
            + ", ".join(sorted(settings))
            + "), but only a single cache is supported"
        )
    local = settings.get("local", {})
    size_text = local.get("size")
    if size_text is None:
        raise InvalidArgumentError("--cache-config local needs a size: local,size=<bytes>")
    if not size_text.isdigit() or int(size_text) <= 0:
        raise InvalidArgumentError(
            f"--cache-config local,size must be a positive number of bytes, got '{size_text}'"
        )
    return int(size_text)


def check_model_cache(config: ModelConfig, server_cache: bool) -> str | None:
    """Refuse, at load, a model whose ``response_cache`` can never be honoured; return a warning
    for the loader to log when it cannot be honoured on this server (no ``--cache-config``)."""
    if not config.response_cache.enable:
        return None
    name = config.name
    if config.WhichOneof("scheduling_choice") == "sequence_batching":
        raise ConfigError(
            f"the response cache does not support model '{name}' with the sequence batcher: "
            "a sequence's answers depend on its state; set response_cache { enable: false }"
        )
    if config.model_transaction_policy.decoupled:
        raise ConfigError(
            f"the response cache does not support model '{name}' with a decoupled transaction "
            "policy; set response_cache { enable: false }"
        )
    if not server_cache:
        # Triton serves such a model uncached; so does inferd (a Triton repository loads
        # unchanged), and says so in the log
        return (
            f"model '{name}' enables response_cache but the server has no cache, so its "
            "responses are not cached: start the server with --cache-config local,size=<bytes> "
            "to cache them, or set response_cache { enable: false } to silence this warning"
        )
    return None


def _param_items(params: Mapping[str, ParamValue], skip: frozenset[str] = frozenset()) -> list[Any]:
    # (key, type, value): True and 1 are equal in Python, not in a request
    return sorted((k, type(v).__name__, v) for k, v in params.items() if k not in skip)


def request_key(request: InferRequest, model_name: str, version: int, epoch: int = 0) -> bytes:
    """The cache key of ``request`` addressed to ``model_name`` version ``version`` as loaded
    at ``epoch`` (a reload gets a new epoch, so it never reads an earlier load's entries).
    The outputs the request asks for are no part of it: an entry holds every raw output.

    A header (rendered with ``repr``, so every string is quoted and every field delimited)
    carries the names, datatypes and shapes; each input's bytes follow in the header's order,
    their lengths fixed by it (BYTES elements carry their own length)."""
    inputs = request.inputs
    names = sorted(inputs)
    arrays = [inputs[n] for n in names]
    params = request.parameters
    # dtype.num tells apart the extension types (bfloat16, float8...) that share a dtype.str;
    # it is fixed for the life of the process, as the cache is
    header = repr(
        (
            model_name,
            version,
            epoch,
            [(n, a.dtype.str, a.dtype.num, a.shape) for n, a in zip(names, arrays, strict=True)],
            _param_items(params, SCHEDULING_PARAMETERS) if params else [],
        )
    ).encode()
    digest = blake2b(len(header).to_bytes(8, "little"), digest_size=16)
    digest.update(header)
    for array in arrays:
        if array.dtype.hasobject:
            for item in array.flat:
                raw = item if isinstance(item, bytes) else str(item).encode()
                digest.update(len(raw).to_bytes(8, "little"))
                digest.update(raw)
        else:  # the buffer itself: hashlib reads any contiguous array, custom dtypes too (a
            # memoryview would refuse bfloat16); numpy's stubs do not declare the buffer protocol
            contiguous = array if array.flags.c_contiguous else np.ascontiguousarray(array)
            digest.update(contiguous)  # type: ignore[arg-type]
    return digest.digest()


def _frozen_copy(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    copy = np.array(array, copy=True, order="C")
    copy.flags.writeable = False
    return copy


def _entry_bytes(outputs: Outputs) -> int:
    total = ENTRY_OVERHEAD_BYTES
    for name, array in outputs.items():
        total += OUTPUT_OVERHEAD_BYTES + len(name) + array.nbytes
        if array.dtype.hasobject:
            total += sum(len(item) if isinstance(item, bytes) else 64 for item in array.flat)
    return total


@dataclass(frozen=True, slots=True)
class CacheStats:
    """What the cache holds and has done since it was built."""

    capacity_bytes: int
    used_bytes: int
    entries: int
    hits: int
    misses: int
    evictions: int
    too_large: int  # responses not stored because one alone exceeds the cache


class ResponseCache:
    """A bounded LRU of responses keyed by :func:`request_key`; one per server, shared by every
    model that enables it. Safe to call from any thread (one short lock per call)."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes <= 0:
            raise InvalidArgumentError("the response cache needs a positive size in bytes")
        self._capacity = capacity_bytes
        self._entries: OrderedDict[bytes, tuple[Outputs, int]] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._too_large = 0

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    def lookup(self, key: bytes) -> Outputs | None:
        """The stored outputs (a fresh dict of read-only arrays), or None; a hit becomes the
        most recently used entry."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
        return dict(entry[0])

    def insert(self, key: bytes, outputs: Mapping[str, np.ndarray[Any, Any]]) -> bool:
        """Store read-only copies of ``outputs`` under ``key``, evicting the least recently used
        entries to make room. Returns False when the response alone exceeds the cache."""
        frozen = {name: _frozen_copy(array) for name, array in outputs.items()}
        size = _entry_bytes(frozen)
        with self._lock:
            if size > self._capacity:
                self._too_large += 1
                return False
            old = self._entries.pop(key, None)
            if old is not None:
                self._used -= old[1]
            while self._used + size > self._capacity:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._used -= evicted
                self._evictions += 1
            self._entries[key] = (frozen, size)
            self._used += size
        return True

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def clear(self) -> None:
        """Drop every entry (the counters stay)."""
        with self._lock:
            self._entries.clear()
            self._used = 0

    def statistics(self) -> CacheStats:
        """A snapshot of the cache's size and counters."""
        with self._lock:
            return CacheStats(
                capacity_bytes=self._capacity,
                used_bytes=self._used,
                entries=len(self._entries),
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                too_large=self._too_large,
            )
