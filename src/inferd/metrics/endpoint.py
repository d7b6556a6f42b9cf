"""The metrics endpoint: ``/metrics`` as an ASGI app over a fresh Prometheus registry.

The composition root serves it on its own port (8002 by default) with the HTTP front end's
server, limits and timeouts; this module knows nothing of sockets. A scrape copies the
components' state on the event loop and renders the text in a worker thread
(:mod:`inferd.metrics.snapshots`), one scrape at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.registry import Collector, RestrictedRegistry

from inferd.engine import Engine
from inferd.metrics.gpu import GpuCollector, plain_decimals
from inferd.metrics.health import HealthCollector
from inferd.metrics.models import TRITON_COUNTERS, ModelCollector
from inferd.metrics.snapshots import LoopReads
from inferd.metrics.system import SystemCollector

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def build_registry(
    engine: Engine, collectors: Sequence[Collector] = (), reads: LoopReads | None = None
) -> CollectorRegistry:
    """A fresh registry for one server; nothing is registered globally. ``collectors`` are
    those of the server's other components (the payload log...); ``reads``: where the
    engine's reads are wrapped, for :class:`MetricsApp` to take them on the loop (the other
    components' collectors wrap theirs in the same).

    Besides Triton's metrics it carries the server's readiness and failed model loads, and
    Prometheus' standard ``process_*`` metrics of the server process (CPU seconds, resident
    memory, open files; on Linux), which load generators such as ``inferd perf`` read to
    report the CPU cost of an inference."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    registry.register(SystemCollector())
    registry.register(GpuCollector())  # reports nothing without NVML or a GPU
    reads = reads if reads is not None else LoopReads()
    registry.register(ModelCollector(reads(lambda: engine.model_statistics())))
    registry.register(HealthCollector(reads(engine.is_ready), reads(engine.load_failures)))
    for collector in collectors:
        registry.register(collector)
    return registry


def render(registry: CollectorRegistry | RestrictedRegistry) -> bytes:
    """The text exposition, with Triton's counters under their bare names (no ``_total``)."""
    text = generate_latest(registry)
    for name in TRITON_COUNTERS:
        text = text.replace(f" {name}_total ".encode(), f" {name} ".encode())
    return plain_decimals(text)


class MetricsApp:
    """A tiny ASGI app: ``GET /metrics``. The collectors' reads of the components' state
    (``reads``) run on the event loop; the rest of the render in a worker thread.
    ``/metrics?name[]=A&name[]=B`` answers only those metrics, as Prometheus' Python client
    does (a sampler that reads one figure often need not render every model's)."""

    def __init__(self, registry: CollectorRegistry, reads: LoopReads | None = None) -> None:
        self._registry = registry
        self._reads = reads if reads is not None else LoopReads()
        self._one_at_a_time = asyncio.Lock()

    async def _render(self, names: list[str]) -> bytes:
        registry = self._registry.restricted_registry(names) if names else self._registry
        async with self._one_at_a_time:
            self._reads.take()
            try:
                return await asyncio.to_thread(render, registry)
            finally:
                self._reads.drop()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            status, body, ctype = 404, b'{"error":"Not Found"}', b"application/json"
        elif scope["method"] not in ("GET", "HEAD"):
            status, body, ctype = 405, b'{"error":"Method Not Allowed"}', b"application/json"
        else:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            body = await self._render(query.get("name[]", []))
            status, ctype = 200, CONTENT_TYPE_LATEST.encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


__all__ = ["MetricsApp", "build_registry", "render"]
