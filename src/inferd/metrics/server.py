"""The metrics endpoint (``/metrics`` on its own port, 8002 by default)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, make_asgi_app

from inferd.engine import Engine
from inferd.metrics.system import SystemCollector


def build_registry(engine: Engine) -> CollectorRegistry:
    """A fresh registry for one server; nothing is registered globally."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(SystemCollector())
    return registry


async def start_metrics_server(engine: Engine, host: str, port: int) -> tuple[Any, int]:
    from inferd.frontends.http.server import start_http_server

    app = make_asgi_app(registry=build_registry(engine))
    return await start_http_server(app, host, port)
