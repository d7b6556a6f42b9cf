"""The traffic policy endpoints: which path and method is which endpoint, the API group that
guards each, and the HTTP app serving them through the admin interface."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from inferd.errors import InvalidArgumentError, NotFoundError
from inferd.frontends.access import AccessPolicy, Api
from inferd.frontends.http.app import HttpApp
from inferd.frontends.http.routes import Endpoint, match_route


@pytest.mark.parametrize(
    ("method", "path", "endpoint", "api"),
    [
        ("GET", "/v2/models/m/rollout", Endpoint.MODEL_ROLLOUT, Api.STATISTICS),
        ("PUT", "/v2/models/m/rollout", Endpoint.MODEL_ROLLOUT_SET, Api.ROLLOUT),
        ("DELETE", "/v2/models/m/rollout", Endpoint.MODEL_ROLLOUT_CLEAR, Api.ROLLOUT),
        ("POST", "/v2/models/m/rollout", Endpoint.MODEL_ROLLOUT, Api.STATISTICS),  # then 405
        ("POST", "/v2/models/m/rollout/promote", Endpoint.MODEL_ROLLOUT_PROMOTE, Api.ROLLOUT),
        ("POST", "/v2/models/m/rollout/rollback", Endpoint.MODEL_ROLLOUT_ROLLBACK, Api.ROLLOUT),
        ("POST", "/v2/models/m/feedback", Endpoint.MODEL_FEEDBACK, Api.FEEDBACK),
    ],
)  # fmt: skip
def test_routes(method: str, path: str, endpoint: Endpoint, api: Api) -> None:
    route = match_route(path, method)
    assert route is not None
    assert (route.endpoint, route.model, route.api) == (endpoint, "m", api)


def test_a_policy_belongs_to_the_model_not_a_version() -> None:
    assert match_route("/v2/models/m/versions/2/rollout", "GET") is None
    assert match_route("/v2/models/m/rollout/other", "POST") is None


class _Admin:
    """Records the calls; ``show`` of an unknown model is NOT_FOUND."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def show(self, model: str) -> dict[str, Any]:
        if model != "m":
            raise NotFoundError(f"model '{model}' has no traffic policy")
        self.calls.append(("show", model))
        return {"model": model}

    def set(self, model: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if body.get("kind") != "split":
            raise InvalidArgumentError("rollout policy: kind: wrong")
        self.calls.append(("set", dict(body)))
        return {"model": model, "kind": "split"}

    def clear(self, model: str) -> None:
        self.calls.append(("clear", model))

    def promote(self, model: str) -> dict[str, Any]:
        self.calls.append(("promote", model))
        return {"model": model}

    def rollback(self, model: str, reason: str) -> dict[str, Any]:
        self.calls.append(("rollback", reason))
        return {"model": model}

    def feedback(self, model: str, request_id: str, reward: float) -> dict[str, Any]:
        self.calls.append(("feedback", (request_id, reward)))
        return {"variant": "v1"}


async def _call(
    app: HttpApp, method: str, path: str, body: Any = None, token: str | None = None
) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.request(method, path, json=body, headers=headers)


def _app(
    admin: _Admin | None,
    token: str | None = "t",
    *,
    feedback_token: str | None = None,
    opened: frozenset[Api] = frozenset(),
) -> HttpApp:
    return HttpApp(
        object(),  # type: ignore[arg-type]  # no other route is called
        max_body_bytes=4096,
        log=logging.getLogger("test"),
        access=AccessPolicy(admin_token=token, feedback_token=feedback_token, opened=opened),
        rollout=admin,
    )


async def test_the_app_calls_the_admin_interface() -> None:
    admin = _Admin()
    app = _app(admin)
    assert (await _call(app, "GET", "/v2/models/m/rollout")).json() == {"model": "m"}
    missing = await _call(app, "GET", "/v2/models/x/rollout")
    assert missing.status_code == 404
    put = await _call(app, "PUT", "/v2/models/m/rollout", {"kind": "split"}, "t")
    assert put.json()["kind"] == "split"
    bad = await _call(app, "PUT", "/v2/models/m/rollout", {"kind": "blue"}, "t")
    assert (bad.status_code, bad.json()["error"]) == (400, "rollout policy: kind: wrong")
    assert (await _call(app, "DELETE", "/v2/models/m/rollout", None, "t")).status_code == 200
    assert (await _call(app, "POST", "/v2/models/m/rollout/promote", {}, "t")).status_code == 200
    back = await _call(app, "POST", "/v2/models/m/rollout/rollback", {"reason": "r"}, "t")
    assert back.status_code == 200
    fed = await _call(app, "POST", "/v2/models/m/feedback", {"id": "a", "reward": 0.5}, "t")
    assert fed.json() == {"variant": "v1"}
    assert [name for name, _ in admin.calls] == [
        "show", "set", "clear", "promote", "rollback", "feedback"
    ]  # fmt: skip
    assert admin.calls[-1] == ("feedback", ("a", 0.5))
    assert admin.calls[-2] == ("rollback", "r")


async def test_changes_and_feedback_need_the_admin_token_and_reads_do_not() -> None:
    admin = _Admin()
    app = _app(admin)
    for method, path in (
        ("PUT", "/v2/models/m/rollout"),
        ("DELETE", "/v2/models/m/rollout"),
        ("POST", "/v2/models/m/rollout/promote"),
        ("POST", "/v2/models/m/rollout/rollback"),
    ):
        reply = await _call(app, method, path, {"kind": "split"})
        assert reply.status_code == 401, (method, path)
    assert (await _call(app, "GET", "/v2/models/m/rollout")).status_code == 200
    fed = await _call(app, "POST", "/v2/models/m/feedback", {"id": "a", "reward": 1})
    assert fed.status_code == 401  # inference rights alone cannot steer a bandit
    assert "feedback token or admin token" in fed.json()["error"]
    assert (await _call(app, "POST", "/v2/models/m/rollout", {}, "t")).status_code == 405
    assert [name for name, _ in admin.calls] == ["show"]


_CHANGES: tuple[tuple[str, str, Any], ...] = (
    ("PUT", "/v2/models/m/rollout", {"kind": "split"}),
    ("DELETE", "/v2/models/m/rollout", None),
    ("POST", "/v2/models/m/rollout/promote", {}),
    ("POST", "/v2/models/m/rollout/rollback", {}),
)


async def test_without_a_token_changes_and_feedback_are_closed() -> None:
    admin = _Admin()
    app = _app(admin, token=None)
    for method, path, body in _CHANGES:
        reply = await _call(app, method, path, body, "guess")
        assert reply.status_code == 403, (method, path)
        error = reply.json()["error"]
        assert "the rollout API is closed" in error
        assert "--admin-token-file" in error
        assert "--open-api rollout" in error
    fed = await _call(app, "POST", "/v2/models/m/feedback", {"id": "a", "reward": 1})
    assert fed.status_code == 403
    assert "--feedback-token-file" in fed.json()["error"]
    assert "--open-api feedback" in fed.json()["error"]
    assert (await _call(app, "GET", "/v2/models/m/rollout")).status_code == 200
    assert [name for name, _ in admin.calls] == ["show"]


async def test_open_api_opens_the_closed_groups_to_every_client() -> None:
    admin = _Admin()
    app = _app(admin, token=None, opened=frozenset({Api.ROLLOUT, Api.FEEDBACK}))
    for method, path, body in _CHANGES:
        reply = await _call(app, method, path, body)
        assert reply.status_code == 200, (method, path, reply.text)
    fed = await _call(app, "POST", "/v2/models/m/feedback", {"id": "a", "reward": 1})
    assert fed.status_code == 200
    only_feedback = _app(_Admin(), token="t", opened=frozenset({Api.FEEDBACK}))
    fed = await _call(only_feedback, "POST", "/v2/models/m/feedback", {"id": "a", "reward": 1})
    assert fed.status_code == 200  # opened: no token needed even though one is set
    put = await _call(only_feedback, "PUT", "/v2/models/m/rollout", {"kind": "split"})
    assert put.status_code == 401  # the rollout group still takes the admin token


async def test_feedback_takes_its_own_token_or_the_admin_token() -> None:
    admin = _Admin()
    app = _app(admin, token="t", feedback_token="f")
    body = {"id": "a", "reward": 1}
    assert (await _call(app, "POST", "/v2/models/m/feedback", body, "f")).status_code == 200
    assert (await _call(app, "POST", "/v2/models/m/feedback", body, "t")).status_code == 200
    assert (await _call(app, "POST", "/v2/models/m/feedback", body, "x")).status_code == 401
    assert (await _call(app, "POST", "/v2/models/m/feedback", body)).status_code == 401
    put = await _call(app, "PUT", "/v2/models/m/rollout", {"kind": "split"}, "f")
    assert put.status_code == 401  # the feedback token changes no policy
    alone = _app(_Admin(), token=None, feedback_token="f")
    assert (await _call(alone, "POST", "/v2/models/m/feedback", body, "f")).status_code == 200
    assert (await _call(alone, "PUT", "/v2/models/m/rollout", {}, "f")).status_code == 403
    assert [name for name, _ in admin.calls] == ["feedback", "feedback"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"reward": 1}, "needs 'id'"),
        ({"id": "", "reward": 1}, "needs 'id'"),
        ({"id": "a"}, "needs 'reward'"),
        ({"id": "a", "reward": "1"}, "needs 'reward'"),
        ({"id": "a", "reward": True}, "needs 'reward'"),
        ({"id": "a", "reward": 1, "extra": 2}, "unknown field 'extra'"),
    ],
)
async def test_feedback_bodies_are_checked(body: dict[str, Any], message: str) -> None:
    admin = _Admin()
    reply = await _call(_app(admin), "POST", "/v2/models/m/feedback", body, "t")
    assert reply.status_code == 400
    assert message in reply.json()["error"]
    assert admin.calls == []


async def test_rollback_and_promote_bodies_are_checked() -> None:
    app = _app(_Admin())
    odd = await _call(app, "POST", "/v2/models/m/rollout/rollback", {"reason": 3}, "t")
    assert "'reason'" in odd.json()["error"]
    extra = await _call(app, "POST", "/v2/models/m/rollout/promote", {"stage": 2}, "t")
    assert "unknown field 'stage'" in extra.json()["error"]


async def test_without_policies_the_routes_say_so() -> None:
    reply = await _call(_app(None, token=None), "GET", "/v2/models/m/rollout")
    assert reply.status_code == 404
    assert "traffic policies" in reply.json()["error"]
