"""A Ray Serve deployment that serves a Triton model repository with inferd's engine inside.

Each replica starts an inferd server with no listeners of its own and answers Ray Serve's HTTP
traffic with inferd's KServe v2 ASGI app (``@serve.ingress``), so ``tritonclient``, KServe
clients and ``curl`` talk to Ray Serve's proxy as they would to ``inferd serve``::

    from ray import serve
    from inferd.integrations.ray_serve import inferd_deployment

    app = inferd_deployment(
        autoscaling_config={"min_replicas": 1, "max_replicas": 4,
                            "target_ongoing_requests": 8},
    ).bind("/models", load_models=("densenet",))
    serve.run(app, route_prefix="/")   # the v2 paths start at /v2: mount it at the root

``bind`` takes the repository and any :class:`~inferd.server.config.ServerConfig` field by
keyword (``load_models`` switches the replica to explicit model control). Scaling is Ray
Serve's: ``autoscaling_config`` adds replicas when the ongoing requests per replica pass
``target_ongoing_requests``; since inferd batches the requests a replica holds, a target of a
few times the model's preferred batch size keeps batches full without queueing for long, and
``max_ongoing_requests`` (default here: 64) bounds what one replica accepts before Ray routes
elsewhere. Each replica loads every model it serves; shared memory, the metrics port and
drift reports are not served through Ray (use Ray's own metrics).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from inferd.frontends.http.app import HttpApp
from inferd.repository.manager import ControlMode
from inferd.server.config import ServerConfig
from inferd.server.server import Server

__all__ = ["InferdReplica", "inferd_deployment"]

DEFAULT_MAX_ONGOING_REQUESTS = 64


def replica_config(model_repository: str | Path, **options: Any) -> ServerConfig:
    """The replica's server settings: no listeners of its own; explicit model control when
    ``load_models`` names models."""
    if options.get("load_models") and "model_control_mode" not in options:
        options["model_control_mode"] = ControlMode.EXPLICIT
    if "load_models" in options:
        options["load_models"] = tuple(options["load_models"])
    config = ServerConfig(model_repositories=(Path(model_repository),), **options)
    return replace(config, allow_http=False, allow_grpc=False, allow_metrics=False)


class InferdReplica:
    """One Ray Serve replica: an inferd server, and its HTTP app as the ingress."""

    async def __init__(self, model_repository: str | Path, **options: Any) -> None:  # type: ignore[misc]
        self._server = Server(replica_config(model_repository, **options))
        await self._server.start()

    def __serve_build_asgi_app__(self) -> HttpApp:
        config = self._server.config
        return HttpApp(
            self._server.engine,
            max_body_bytes=config.http_max_input_bytes,
            max_json_body_bytes=config.http_max_json_input_bytes,
            access=config.http_access(),
            log=logging.getLogger("inferd.http"),
        )

    async def check_health(self) -> None:
        """Ray Serve's health check: the replica is healthy while its models are ready."""
        if not self._server.engine.is_ready():
            raise RuntimeError("inferd: not every model of the replica is ready")

    async def __del__(self) -> None:
        await self._server.stop()


def inferd_deployment(**deployment_options: Any) -> Any:
    """The Ray Serve deployment of :class:`InferdReplica`; ``deployment_options`` are
    ``serve.deployment``'s (``num_replicas``, ``autoscaling_config``, ``ray_actor_options``,
    ``max_ongoing_requests``…). Call ``.bind(model_repository, **server_options)`` on it."""
    try:
        from ray import serve
    except ImportError:
        raise ImportError("the Ray Serve deployment needs Ray: pip install 'inferd[ray]'") from None
    deployment_options.setdefault("max_ongoing_requests", DEFAULT_MAX_ONGOING_REQUESTS)
    deployment_options.setdefault("name", "inferd")
    return serve.deployment(**deployment_options)(serve.ingress()(InferdReplica))
