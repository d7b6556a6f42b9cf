"""The traffic policy endpoints: the admin API of ``/v2/models/{m}/rollout`` and the feedback
endpoint ``/v2/models/{m}/feedback``, as pure functions from a route and a JSON body to the
answer (the app reads the body and sends the reply).

``GET .../rollout`` is read-only (the statistics API group); ``PUT`` / ``DELETE .../rollout``
and ``POST .../rollout/promote|rollback`` change what the server does (the ``rollout`` group,
which the admin token guards); ``POST .../feedback`` steers bandits (the ``feedback`` group, for
the feedback token or the admin token). Both groups are closed until a token guards them or the
operator opens them (:mod:`inferd.frontends.access`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferd.core.routing import RolloutAdmin
from inferd.errors import InvalidArgumentError
from inferd.frontends.http.routes import Endpoint

__all__ = ["ROLLOUT_ENDPOINTS", "rollout_answer"]

ROLLOUT_ENDPOINTS = frozenset(
    {
        Endpoint.MODEL_ROLLOUT,
        Endpoint.MODEL_ROLLOUT_SET,
        Endpoint.MODEL_ROLLOUT_CLEAR,
        Endpoint.MODEL_ROLLOUT_PROMOTE,
        Endpoint.MODEL_ROLLOUT_ROLLBACK,
        Endpoint.MODEL_FEEDBACK,
    }
)


def _only(body: Mapping[str, Any], allowed: set[str], what: str) -> None:
    for key in body:
        if key not in allowed:
            raise InvalidArgumentError(
                f"unknown field '{key}' in the {what}; expected {', '.join(sorted(allowed))}"
            )


def rollout_answer(
    admin: RolloutAdmin, endpoint: Endpoint, model: str, body: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The JSON answer (None: an empty 200) of one traffic policy endpoint."""
    if endpoint is Endpoint.MODEL_ROLLOUT:
        return admin.show(model)
    if endpoint is Endpoint.MODEL_ROLLOUT_SET:
        return admin.set(model, body)
    if endpoint is Endpoint.MODEL_ROLLOUT_CLEAR:
        admin.clear(model)
        return None
    if endpoint is Endpoint.MODEL_ROLLOUT_PROMOTE:
        _only(body, set(), "promote request")
        return admin.promote(model)
    if endpoint is Endpoint.MODEL_ROLLOUT_ROLLBACK:
        _only(body, {"reason"}, "rollback request")
        reason = body.get("reason", "")
        if not isinstance(reason, str):
            raise InvalidArgumentError("'reason' of the rollback request must be a string")
        return admin.rollback(model, reason)
    _only(body, {"id", "reward"}, "feedback request")
    request_id = body.get("id")
    if not isinstance(request_id, str) or not request_id:
        raise InvalidArgumentError("the feedback request needs 'id': the id its response carried")
    reward = body.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        raise InvalidArgumentError("the feedback request needs 'reward': a number")
    return admin.feedback(model, request_id, float(reward))
