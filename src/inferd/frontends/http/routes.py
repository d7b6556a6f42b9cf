"""URL routing of the v2 REST API (PROTOCOL.md §1.1), as data: path -> :class:`Route`.

Each endpoint belongs to one API group of :mod:`inferd.frontends.access`, grouped as Triton
groups them for ``--http-restricted-api`` (model readiness is a health API); inferd's own
endpoints that steer traffic form the ``rollout`` and ``feedback`` groups. A model name in a
path is percent-decoded as UTF-8 and checked by :func:`inferd.core.names.check_model_name`.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from urllib.parse import unquote

from inferd.core.names import check_model_name
from inferd.errors import InvalidArgumentError
from inferd.frontends.access import Api


class Endpoint(enum.Enum):
    SERVER_METADATA = "server_metadata"
    HEALTH_LIVE = "health_live"
    HEALTH_READY = "health_ready"
    MODEL_METADATA = "model_metadata"
    MODEL_READY = "model_ready"
    MODEL_CONFIG = "model_config"
    MODEL_INFER = "model_infer"
    MODEL_GENERATE = "model_generate"
    MODEL_GENERATE_STREAM = "model_generate_stream"
    MODEL_STATS = "model_stats"
    MODEL_DRIFT = "model_drift"
    MODEL_ROLLOUT = "model_rollout"
    MODEL_ROLLOUT_SET = "model_rollout_set"
    MODEL_ROLLOUT_CLEAR = "model_rollout_clear"
    MODEL_ROLLOUT_PROMOTE = "model_rollout_promote"
    MODEL_ROLLOUT_ROLLBACK = "model_rollout_rollback"
    MODEL_FEEDBACK = "model_feedback"
    ALL_STATS = "all_stats"
    REPOSITORY_INDEX = "repository_index"
    REPOSITORY_LOAD = "repository_load"
    REPOSITORY_UNLOAD = "repository_unload"
    REPOSITORY_ROLLBACK = "repository_rollback"
    REPOSITORY_UNPIN = "repository_unpin"
    SYSTEM_SHM_STATUS = "system_shm_status"
    SYSTEM_SHM_REGISTER = "system_shm_register"
    SYSTEM_SHM_UNREGISTER = "system_shm_unregister"
    CUDA_SHM_STATUS = "cuda_shm_status"
    CUDA_SHM_REGISTER = "cuda_shm_register"
    CUDA_SHM_UNREGISTER = "cuda_shm_unregister"


METHOD: dict[Endpoint, str] = {
    Endpoint.SERVER_METADATA: "GET",
    Endpoint.HEALTH_LIVE: "GET",
    Endpoint.HEALTH_READY: "GET",
    Endpoint.MODEL_METADATA: "GET",
    Endpoint.MODEL_READY: "GET",
    Endpoint.MODEL_CONFIG: "GET",
    Endpoint.MODEL_INFER: "POST",
    Endpoint.MODEL_GENERATE: "POST",
    Endpoint.MODEL_GENERATE_STREAM: "POST",
    Endpoint.MODEL_STATS: "GET",
    Endpoint.MODEL_DRIFT: "GET",
    Endpoint.MODEL_ROLLOUT: "GET",
    Endpoint.MODEL_ROLLOUT_SET: "PUT",
    Endpoint.MODEL_ROLLOUT_CLEAR: "DELETE",
    Endpoint.MODEL_ROLLOUT_PROMOTE: "POST",
    Endpoint.MODEL_ROLLOUT_ROLLBACK: "POST",
    Endpoint.MODEL_FEEDBACK: "POST",
    Endpoint.ALL_STATS: "GET",
    Endpoint.REPOSITORY_INDEX: "POST",
    Endpoint.REPOSITORY_LOAD: "POST",
    Endpoint.REPOSITORY_UNLOAD: "POST",
    Endpoint.REPOSITORY_ROLLBACK: "POST",
    Endpoint.REPOSITORY_UNPIN: "POST",
    Endpoint.SYSTEM_SHM_STATUS: "GET",
    Endpoint.SYSTEM_SHM_REGISTER: "POST",
    Endpoint.SYSTEM_SHM_UNREGISTER: "POST",
    Endpoint.CUDA_SHM_STATUS: "GET",
    Endpoint.CUDA_SHM_REGISTER: "POST",
    Endpoint.CUDA_SHM_UNREGISTER: "POST",
}

API: dict[Endpoint, Api] = {
    Endpoint.SERVER_METADATA: Api.METADATA,
    Endpoint.HEALTH_LIVE: Api.HEALTH,
    Endpoint.HEALTH_READY: Api.HEALTH,
    Endpoint.MODEL_METADATA: Api.METADATA,
    Endpoint.MODEL_READY: Api.HEALTH,
    Endpoint.MODEL_CONFIG: Api.MODEL_CONFIG,
    Endpoint.MODEL_INFER: Api.INFERENCE,
    Endpoint.MODEL_GENERATE: Api.INFERENCE,
    Endpoint.MODEL_GENERATE_STREAM: Api.INFERENCE,
    Endpoint.MODEL_STATS: Api.STATISTICS,
    Endpoint.MODEL_DRIFT: Api.STATISTICS,  # read-only, like the statistics
    Endpoint.MODEL_ROLLOUT: Api.STATISTICS,  # the traffic policy's figures, read-only
    Endpoint.MODEL_ROLLOUT_SET: Api.ROLLOUT,  # changes which version serves which request
    Endpoint.MODEL_ROLLOUT_CLEAR: Api.ROLLOUT,
    Endpoint.MODEL_ROLLOUT_PROMOTE: Api.ROLLOUT,
    Endpoint.MODEL_ROLLOUT_ROLLBACK: Api.ROLLOUT,
    Endpoint.MODEL_FEEDBACK: Api.FEEDBACK,  # a reward: it steers a bandit's traffic
    Endpoint.ALL_STATS: Api.STATISTICS,
    Endpoint.REPOSITORY_INDEX: Api.MODEL_REPOSITORY,
    Endpoint.REPOSITORY_LOAD: Api.MODEL_REPOSITORY,
    Endpoint.REPOSITORY_UNLOAD: Api.MODEL_REPOSITORY,
    Endpoint.REPOSITORY_ROLLBACK: Api.ROLLOUT,  # inferd's own: pins the default version
    Endpoint.REPOSITORY_UNPIN: Api.ROLLOUT,
    Endpoint.SYSTEM_SHM_STATUS: Api.SHARED_MEMORY,
    Endpoint.SYSTEM_SHM_REGISTER: Api.SHARED_MEMORY,
    Endpoint.SYSTEM_SHM_UNREGISTER: Api.SHARED_MEMORY,
    Endpoint.CUDA_SHM_STATUS: Api.SHARED_MEMORY,
    Endpoint.CUDA_SHM_REGISTER: Api.SHARED_MEMORY,
    Endpoint.CUDA_SHM_UNREGISTER: Api.SHARED_MEMORY,
}

_MODEL_SUFFIX = {
    None: Endpoint.MODEL_METADATA,
    "ready": Endpoint.MODEL_READY,
    "config": Endpoint.MODEL_CONFIG,
    "infer": Endpoint.MODEL_INFER,
    "generate": Endpoint.MODEL_GENERATE,
    "generate_stream": Endpoint.MODEL_GENERATE_STREAM,
    "stats": Endpoint.MODEL_STATS,
    "drift": Endpoint.MODEL_DRIFT,
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
    r"(?:/(?P<suffix>infer|generate_stream|generate|ready|config|stats|drift))?"
)
_REPOSITORY_RE = re.compile(
    r"/v2/repository/models/(?P<model>[^/]+)/(?P<action>load|unload|rollback|unpin)"
)
_REPOSITORY_ACTIONS = {
    "load": Endpoint.REPOSITORY_LOAD,
    "unload": Endpoint.REPOSITORY_UNLOAD,
    "rollback": Endpoint.REPOSITORY_ROLLBACK,  # inferd's own: no Triton counterpart
    "unpin": Endpoint.REPOSITORY_UNPIN,
}
# a model's traffic policy (one per model, whatever the version) and feedback on its answers
_ROLLOUT_RE = re.compile(
    r"/v2/models/(?P<model>[^/]+)/(?P<action>rollout|rollout/promote|rollout/rollback|feedback)"
)
_ROLLOUT_BY_METHOD = {"PUT": Endpoint.MODEL_ROLLOUT_SET, "DELETE": Endpoint.MODEL_ROLLOUT_CLEAR}
_ROLLOUT_ACTIONS = {
    "rollout/promote": Endpoint.MODEL_ROLLOUT_PROMOTE,
    "rollout/rollback": Endpoint.MODEL_ROLLOUT_ROLLBACK,
    "feedback": Endpoint.MODEL_FEEDBACK,
}
_SHM_RE = re.compile(
    r"/v2/(?P<kind>system|cuda)sharedmemory(?:/region/(?P<region>[^/]+))?"
    r"/(?P<action>status|register|unregister)"
)
_SHM_ENDPOINTS = {
    ("system", "status"): Endpoint.SYSTEM_SHM_STATUS,
    ("system", "register"): Endpoint.SYSTEM_SHM_REGISTER,
    ("system", "unregister"): Endpoint.SYSTEM_SHM_UNREGISTER,
    ("cuda", "status"): Endpoint.CUDA_SHM_STATUS,
    ("cuda", "register"): Endpoint.CUDA_SHM_REGISTER,
    ("cuda", "unregister"): Endpoint.CUDA_SHM_UNREGISTER,
}


@dataclass(frozen=True, slots=True)
class Route:
    endpoint: Endpoint
    model: str = ""
    version: str = ""  # "" = not given in the URL
    region: str = ""  # shared-memory endpoints: the region named in the URL, "" = none

    @property
    def method(self) -> str:
        return METHOD[self.endpoint]

    @property
    def api(self) -> Api:
        return API[self.endpoint]


def _model_name(encoded: str) -> str:
    if "%" not in encoded:
        return check_model_name(encoded)
    try:
        name = unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        raise InvalidArgumentError(
            f"invalid model name {encoded!r}: its percent-encoding is not valid UTF-8"
        ) from None
    return check_model_name(name)


def match_route(raw_path: str, method: str = "GET") -> Route | None:
    """Match a still percent-encoded path (no query string); ``None`` for an unknown route.

    Matching happens before percent-decoding, so an encoded ``/`` stays inside a model name
    and is then refused by the name rule, like every other invalid name
    (:class:`InvalidArgumentError`). ``method`` tells apart the endpoints that share a path
    (a traffic policy's GET, PUT and DELETE); on other paths it plays no part.
    """
    fixed = _FIXED.get(raw_path)
    if fixed is not None:
        return Route(fixed)
    found = _MODEL_RE.fullmatch(raw_path)
    if found is not None:
        return Route(
            _MODEL_SUFFIX[found.group("suffix")],
            _model_name(found.group("model")),
            found.group("version") or "",
        )
    found = _REPOSITORY_RE.fullmatch(raw_path)
    if found is not None:
        return Route(_REPOSITORY_ACTIONS[found.group("action")], _model_name(found.group("model")))
    found = _ROLLOUT_RE.fullmatch(raw_path)
    if found is not None:
        action = found.group("action")
        endpoint = (
            _ROLLOUT_BY_METHOD.get(method, Endpoint.MODEL_ROLLOUT)
            if action == "rollout"
            else _ROLLOUT_ACTIONS[action]
        )
        return Route(endpoint, _model_name(found.group("model")))
    found = _SHM_RE.fullmatch(raw_path)
    if found is not None:
        region = found.group("region") or ""
        return Route(
            _SHM_ENDPOINTS[found.group("kind"), found.group("action")],
            region=_region_name(region) if region else "",
        )
    return None


def _region_name(encoded: str) -> str:
    try:
        return unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        raise InvalidArgumentError(
            f"invalid region name {encoded!r}: its percent-encoding is not valid UTF-8"
        ) from None


__all__ = ["API", "METHOD", "Endpoint", "Route", "match_route"]
