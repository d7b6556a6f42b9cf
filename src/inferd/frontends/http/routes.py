"""URL routing of the v2 REST API (PROTOCOL.md §1.1), as data: path -> :class:`Route`."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from urllib.parse import unquote


class Endpoint(enum.Enum):
    SERVER_METADATA = "server_metadata"
    HEALTH_LIVE = "health_live"
    HEALTH_READY = "health_ready"
    MODEL_METADATA = "model_metadata"
    MODEL_READY = "model_ready"
    MODEL_CONFIG = "model_config"
    MODEL_INFER = "model_infer"
    MODEL_STATS = "model_stats"
    ALL_STATS = "all_stats"
    REPOSITORY_INDEX = "repository_index"
    REPOSITORY_LOAD = "repository_load"
    REPOSITORY_UNLOAD = "repository_unload"


METHOD: dict[Endpoint, str] = {
    Endpoint.SERVER_METADATA: "GET",
    Endpoint.HEALTH_LIVE: "GET",
    Endpoint.HEALTH_READY: "GET",
    Endpoint.MODEL_METADATA: "GET",
    Endpoint.MODEL_READY: "GET",
    Endpoint.MODEL_CONFIG: "GET",
    Endpoint.MODEL_INFER: "POST",
    Endpoint.MODEL_STATS: "GET",
    Endpoint.ALL_STATS: "GET",
    Endpoint.REPOSITORY_INDEX: "POST",
    Endpoint.REPOSITORY_LOAD: "POST",
    Endpoint.REPOSITORY_UNLOAD: "POST",
}

_MODEL_SUFFIX = {
    None: Endpoint.MODEL_METADATA,
    "ready": Endpoint.MODEL_READY,
    "config": Endpoint.MODEL_CONFIG,
    "infer": Endpoint.MODEL_INFER,
    "stats": Endpoint.MODEL_STATS,
}

_FIXED = {
    "/v2": Endpoint.SERVER_METADATA,
    "/v2/health/live": Endpoint.HEALTH_LIVE,
    "/v2/health/ready": Endpoint.HEALTH_READY,
    "/v2/models/stats": Endpoint.ALL_STATS,  # checked before the model pattern, like Triton
    "/v2/repository/index": Endpoint.REPOSITORY_INDEX,
}

_MODEL_RE = re.compile(
    r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[0-9]+))?"
    r"(?:/(?P<suffix>infer|ready|config|stats))?"
)
_REPOSITORY_RE = re.compile(r"/v2/repository/models/(?P<model>[^/]+)/(?P<action>load|unload)")


@dataclass(frozen=True, slots=True)
class Route:
    endpoint: Endpoint
    model: str = ""
    version: str = ""  # "" = not given in the URL

    @property
    def method(self) -> str:
        return METHOD[self.endpoint]


def match_route(raw_path: str) -> Route | None:
    """Match a still percent-encoded path (no query string); ``None`` for an unknown route.

    Matching happens before percent-decoding, so an encoded ``/`` stays inside a model name.
    """
    fixed = _FIXED.get(raw_path)
    if fixed is not None:
        return Route(fixed)
    found = _MODEL_RE.fullmatch(raw_path)
    if found is not None:
        return Route(
            _MODEL_SUFFIX[found.group("suffix")],
            unquote(found.group("model")),
            found.group("version") or "",
        )
    found = _REPOSITORY_RE.fullmatch(raw_path)
    if found is not None:
        endpoint = (
            Endpoint.REPOSITORY_LOAD
            if found.group("action") == "load"
            else Endpoint.REPOSITORY_UNLOAD
        )
        return Route(endpoint, unquote(found.group("model")))
    return None


__all__ = ["METHOD", "Endpoint", "Route", "match_route"]
