"""The drift report's routes: read-only GETs in the statistics API group, guarded like it."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from inferd.frontends.access import AccessPolicy, Api, parse_restriction
from inferd.frontends.http.app import HttpApp
from inferd.frontends.http.routes import Endpoint, match_route


def test_routes_match_and_belong_to_statistics() -> None:
    for path, version in (
        ("/v2/models/fraud/drift", ""),
        ("/v2/models/fraud/versions/3/drift", "3"),
    ):
        route = match_route(path)
        assert route is not None
        assert (route.endpoint, route.model, route.version) == (
            Endpoint.MODEL_DRIFT,
            "fraud",
            version,
        )
        assert route.method == "GET"
        assert route.api is Api.STATISTICS


class _Engine:
    """The app only needs an engine for other routes."""


async def _get(
    app: HttpApp, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.request(method, path, headers=headers or {})


async def test_the_report_is_served_and_guarded_like_statistics() -> None:
    asked: list[tuple[str, str]] = []

    def report(model: str, version: str) -> dict[str, Any]:
        asked.append((model, version))
        return {"model": model, "versions": []}

    policy = AccessPolicy((parse_restriction("statistics:x-key=secret"),), None)
    app = HttpApp(
        _Engine(),  # type: ignore[arg-type]
        max_body_bytes=1024,
        log=logging.getLogger("test"),
        access=policy,
        drift_report=report,
    )
    refused = await _get(app, "/v2/models/fraud/drift")
    assert refused.status_code in (401, 403)
    served = await _get(app, "/v2/models/fraud/versions/2/drift", {"x-key": "secret"})
    assert served.status_code == 200
    assert served.json() == {"model": "fraud", "versions": []}
    assert asked == [("fraud", "2")]
    posted = await _get(app, "/v2/models/fraud/drift", {"x-key": "secret"}, method="POST")
    assert posted.status_code == 405  # read-only
    assert len(asked) == 1


@pytest.mark.parametrize("path", ["/v2/models/fraud/drift"])
async def test_without_monitoring_the_route_says_how_to_turn_it_on(path: str) -> None:
    app = HttpApp(_Engine(), max_body_bytes=1024, log=logging.getLogger("test"))  # type: ignore[arg-type]
    reply = await _get(app, path)
    assert reply.status_code == 404
    assert "--monitor-drift" in reply.json()["error"]
